"""The task-vector family (task_arithmetic, ties, dare_*, breadcrumbs*, della*): one generic merge.

Per tensor (docs/spec/merge-methods.md §2): δ_i = x_i − b, sparsified by density (optionally L1-rescaled), weighted,
then mixed with or without sign consensus, optionally normalised, scaled by `lambda`, added to the base.
Each method is a row of `task_vector_methods`: which sparsifier and consensus it uses and its defaults, made a
method by `task_vector_method`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from guiapp.errors import IncompatibleModelsError, RecipeError
from guiapp.merging.method_declarations import Sparsifier
from guiapp.merging.method_schema import MethodDeclaration
from guiapp.merging.methods import _reduce, _selection
from guiapp.merging.methods._stored import merge_in_chunks
from guiapp.merging.methods.base import (
    MergeContext,
    MergeMethod,
    TensorSettings,
    TensorSurvey,
    WorkingCopies,
    row_halves,
)

# Below these L1 sums a rescale factor would be noise over noise (mergekit's issue #609: inf, then NaN).
_RESCALE_EPS = 1e-7
_DIVISOR_EPS = 1e-8
_ONE = torch.tensor(1.0, dtype=torch.float32)


class _Ranking:
    """Which entries of one model's δ a rank-based sparsifier keeps (TIES' largest |δ|, Breadcrumbs' window), learned
    from |δ| shown a block at a time as `LargestK` learns it: passes of `count` and `end_pass` while `passes_left`,
    then `indicator` on each block in order."""

    def __init__(self, sparsifier: Sparsifier, params: dict, numel: int, dtype: torch.dtype) -> None:
        density = float(params["density"])
        if sparsifier is Sparsifier.MAGNITUDE:
            # Exactly max(1, int(d·numel)) entries (d <= 0: none).
            self._keep = _selection.LargestK(numel, max(1, int(density * numel)) if density > 0 else 0, dtype)
            self._drop = None
        else:
            # Breadcrumbs: rank |δ| descending, skip the top int(gamma·N), keep the next int(d·N).
            target = int(density * numel)
            n_bottom = max(0, numel - target - int(float(params["gamma"]) * numel))
            n_top = numel - target - n_bottom
            self._keep = _selection.LargestK(numel, n_top + target, dtype)
            self._drop = _selection.LargestK(numel, n_top, dtype) if n_top else None
        self._selections = [s for s in (self._keep, self._drop) if s is not None]

    @property
    def passes_left(self) -> int:
        return _selection.passes_left(self._selections)

    @property
    def samples_next_pass(self) -> bool:
        return self._keep.samples_next_pass

    def sample_positions(self, numel: int, block_numel: int | None = None) -> torch.Tensor | None:
        return self._keep.sample_positions(numel, block_numel)  # the drop selection draws the same

    def count_sample(self, magnitudes: torch.Tensor) -> None:
        for selection in self._selections:
            if selection.passes_left:
                selection.count_sample(magnitudes)

    def count(self, magnitudes: torch.Tensor) -> None:
        for selection in self._selections:
            if selection.passes_left:
                selection.count(magnitudes)

    def end_pass(self) -> None:
        _selection.end_pass(self._selections)

    @property
    def kept(self) -> int:
        """How many entries of the whole tensor it keeps: exactly, whatever ties there are."""
        return self._keep.k - (self._drop.k if self._drop is not None else 0)

    def prune(self, delta: torch.Tensor, scratch: torch.Tensor) -> None:
        """Zero the entries of `delta` (the whole tensor, or its next block) that it does not keep, in place;
        `scratch` is a buffer of δ's shape and dtype that this may overwrite."""
        if self._drop is None:
            self._keep.shrink(delta, scratch)
            return
        magnitudes = torch.abs(delta, out=scratch)
        delta.mul_(self._keep.indicator(magnitudes).sub_(self._drop.indicator(magnitudes)))  # dropped ⊂ kept

    @classmethod
    def of_whole(cls, sparsifier: Sparsifier, params: dict, magnitudes: torch.Tensor) -> _Ranking:
        """The ranking of one whole tensor's magnitudes, every pass done."""
        return _selection.shown_whole(cls(sparsifier, params, magnitudes.numel(), magnitudes.dtype), magnitudes)


def random_mask(
    delta: torch.Tensor, density: float, generator: torch.Generator, scratch: torch.Tensor
) -> torch.Tensor:
    """Keep each entry independently with probability d: 1.0 where kept, 0.0 elsewhere, in `scratch`."""
    draws = torch.rand(delta.shape, generator=generator, out=scratch)
    return torch.lt(draws, density, out=draws)


def della_mask(
    delta: torch.Tensor, density: float, epsilon: float, generator: torch.Generator, scratch: torch.Tensor
) -> torch.Tensor:
    """DELLA's MagPrune: per row (last dim; a 1-D tensor is one row) keep with probability (d−ε) + 2ε·rank; 1.0
    where kept, 0.0 elsewhere (float32). `scratch` is a buffer of δ's shape and dtype that this overwrites.

    rank is the entry's magnitude rank in its row normalised to [0, 1] (largest = 1); a row of one entry gets
    probability d. The caller has checked 0 < d−ε and d+ε < 1.
    """
    width = delta.shape[-1] if delta.dim() else 1
    rows = delta.reshape(-1, width)
    # |δ|, then the keep probabilities, in `scratch`: every buffer of a whole tensor is memory the system maps and
    # zeroes afresh (hundreds of MB per model and tensor). In a 1 GB DELLA merge that took 16.6 s of 40 s of CPU
    # time; 12.8 s with these two in `scratch`.
    magnitudes = torch.abs(rows, out=scratch.view(rows.shape))
    order = _selection.order_in_rows(magnitudes)
    if width == 1:
        by_position = torch.full((1,), density, dtype=torch.float64)
    else:
        by_position = torch.linspace(density + epsilon, density - epsilon, width, dtype=torch.float64)
    probabilities = magnitudes.scatter_(1, order, by_position.to(magnitudes).expand_as(rows))
    del order
    draws = torch.rand(rows.shape, generator=generator, device=delta.device, dtype=torch.float32)
    return torch.lt(draws, probabilities, out=draws).view(delta.shape)


def sparsify(
    delta: torch.Tensor,
    sparsifier: Sparsifier,
    params: dict,
    *,
    rescale: bool,
    generator: torch.Generator,
    scratch: torch.Tensor,
    where: str,
    ranking: _Ranking | None = None,
) -> int | None:
    """Sparsify `delta` in place with one model's params; return how many entries were kept, or None for a block
    pruned with the `ranking` of its whole tensor (which knows how many of the tensor it keeps).

    Density >= 1 leaves δ untouched (no pruning, no outlier removal, no rescale). With `rescale`, the kept
    entries are scaled so the L1 norm matches the unpruned δ (skipped when either sum is below 1e-7).
    `scratch` is a float buffer of δ's shape and dtype that this overwrites. A rank-based sparsifier ranks δ's
    own entries, or, for a block of a larger tensor, takes the `ranking` of the whole tensor (counted already).
    Raises RecipeError (naming `where`: model and tensor) when DELLA's density ± epsilon leaves (0, 1).
    """
    density = float(params["density"])
    if density >= 1:
        return delta.numel()
    l1_before = _reduce.sum_abs(delta) if rescale else 0.0
    if sparsifier in (Sparsifier.MAGNITUDE, Sparsifier.OUTLIERS):
        whole = ranking is None
        if whole:
            ranking = _Ranking.of_whole(sparsifier, params, torch.abs(delta, out=scratch))
        ranking.prune(delta, scratch)
        kept_count = ranking.kept if whole else None
        _rescale(delta, l1_before, rescale)
        return kept_count
    if sparsifier is Sparsifier.RANDOM:
        kept = random_mask(delta, density, generator, scratch)
    elif density <= 0:
        kept = torch.zeros_like(delta, dtype=torch.float32)
    else:
        epsilon = float(params["epsilon"])
        check_della_rule(density, epsilon, where)
        kept = della_mask(delta, density, epsilon, generator, scratch)
    delta.mul_(kept)
    kept_count = _selection.count_ones(kept)
    del kept
    _rescale(delta, l1_before, rescale)
    return kept_count


def check_della_rule(density: float, epsilon: float, where: str) -> None:
    """Raise RecipeError (naming `where`) when a density between 0 and 1 (exclusive) and `epsilon` put the keep
    probabilities density ± epsilon outside (0, 1), which mergekit refuses too; other densities ignore epsilon."""
    if 0 < density < 1 and not (density - epsilon > 0 and density + epsilon < 1):
        raise RecipeError(
            f"DELLA needs density - epsilon > 0 and density + epsilon < 1, but {where} has "
            f"density {density:g} and epsilon {epsilon:g}.",
            why="Each change is kept with a probability from density − epsilon (smallest changes) to density + "
            "epsilon (largest), and a probability must lie between 0 and 1: density − epsilon > 0 and "
            "density + epsilon < 1.",
            hint=f"Set `epsilon` to a value between 0 and {min(density, 1 - density):g} (not that value itself), or "
            "move density away from 0 and 1 (e.g. density 0.5, epsilon 0.1).",
            key=("parameters", "epsilon"),
        )


def _check_della_params(model_params: list[dict[str, Any]], params: dict[str, Any], tensor_name: str) -> None:
    """`check_della_rule` for every model's density and epsilon, before any tensor is read."""
    for values in model_params:
        density, epsilon = values.get("density"), values.get("epsilon")
        if isinstance(density, (int, float)) and isinstance(epsilon, (int, float)):
            check_della_rule(float(density), float(epsilon), f"tensor {tensor_name}")


def _rescale(delta: torch.Tensor, l1_before: float, rescale: bool) -> None:
    """With `rescale`, scale the kept entries so δ's L1 norm is `l1_before` again (not when either is below 1e-7)."""
    if rescale:
        l1_after = _reduce.sum_abs(delta)
        if l1_before >= _RESCALE_EPS and l1_after >= _RESCALE_EPS:
            delta.mul_(l1_before / l1_after)


def sum_in_order(tensors: list[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """Σ tensors, added in order, in `out` or a new tensor."""
    if out is None:
        out = torch.empty_like(tensors[0])
    if len(tensors) > 1:
        torch.add(tensors[0], tensors[1], out=out)
    else:
        out.copy_(tensors[0])
    for tensor in tensors[2:]:
        out.add_(tensor)
    return out


def elect_signs(changes: list[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """±1 at each position by the sign of Σ changes (`sum_in_order`), in `out` or a new tensor: + where the sum is
    >= 0. A sum of -0.0 (every change there -0.0, e.g. pruned from a negative value) elects -, where no entry agrees
    either way, so the merged value is the same."""
    total = sum_in_order(changes, out)
    return torch.copysign(_ONE, total, out=total)


def _sign_consensus(
    weighted: list[torch.Tensor], weights: list[float], elected: torch.Tensor, with_divisor: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """TIES' elect-and-merge: keep each entry only in the models whose sign matches the sign of the sum.

    The elected sign is + where the sum is >= 0; a zero entry has no sign, so it never agrees. Returns
    (Σ agreeing δ'_i, Σ agreeing w_i with 0 replaced by 1, or None without `with_divisor`). Reuses the
    tensors of `weighted` and the buffer `elected` (δ's shape) to stay at a few copies of the tensor.
    """
    elect_signs(weighted, out=elected)
    # With s = ±1, relu(s·δ') is |δ'| where δ' agrees with s and 0 elsewhere (exact: s·δ' only flips a sign);
    # summing those and multiplying by s at the end gives Σ agreeing δ'_i in float arithmetic only.
    for delta in weighted:
        delta.mul_(elected).clamp_(min=0)
    mixed = weighted[0]
    divisor = torch.sign(mixed).mul_(weights[0]) if with_divisor else None
    for delta, weight in zip(weighted[1:], weights[1:]):
        mixed.add_(delta)
        if divisor is not None:
            divisor.add_(delta.sign_(), alpha=weight)
    mixed.mul_(elected)
    if divisor is not None:
        no_vote = torch.eq(divisor, 0, out=elected)
        divisor.add_(no_vote)
    return mixed, divisor


def _base_of(ctx: MergeContext) -> torch.Tensor:
    """The base input of `ctx`. Raises IncompatibleModelsError when the tensor has none."""
    if ctx.base is None:
        raise IncompatibleModelsError(
            f"{ctx.tensor_name} is missing from the base model, and this method measures every change "
            "against the base.",
            hint="Choose a base model that has this tensor, or a method without a base (linear, karcher).",
        )
    return ctx.base


def _rounded_to(value: float, dtype: torch.dtype) -> float:
    """`value` rounded to `dtype`, as mergekit's weights are (a tensor of them in the deltas' dtype): the same for
    float32 and float64, whose arithmetic rounds a Python float so anyway; 0.3 becomes 0.30078125 in bfloat16."""
    return float(torch.tensor(value, dtype=dtype))


def _weight_divisor(weights: list[float]) -> float:
    """What `normalize` divides the mixed changes by, without sign consensus: the weights' sum, or 1 where they
    cancel out."""
    total = sum(weights)
    return 1.0 if abs(total) < _DIVISOR_EPS else total


def merge_task_vectors(
    ctx: MergeContext, sparsifier: Sparsifier | None, consensus: bool, rankings: dict[int, _Ranking] | None = None
) -> torch.Tensor:
    """The generic task-vector merge of one tensor (see the module docstring), or of one block of it with the
    `rankings` of the whole tensor's inputs (by input index).

    Raises IncompatibleModelsError when the tensor has no base input, RecipeError for invalid DELLA params.
    """
    base = _base_of(ctx)
    inputs = ctx.non_base()
    if not inputs:
        return base
    rescale = bool(ctx.params.get("rescale", False))
    scratch = torch.empty_like(base) if (sparsifier is not None or consensus) else None
    weighted: list[torch.Tensor] = []
    weights: list[float] = []
    kept = 0
    for i in inputs:
        delta = ctx.tensors[i] - base
        if sparsifier is not None:
            where = f'model "{ctx.model_names[i]}" at tensor {ctx.tensor_name}'
            kept += sparsify(
                delta, sparsifier, ctx.model_params[i], rescale=rescale, generator=ctx.generator,
                scratch=scratch, where=where, ranking=rankings.get(i) if rankings else None,
            ) or 0
        weight = float(ctx.model_params[i]["weight"])
        weighted.append(delta.mul_(_rounded_to(weight, delta.dtype)) if weight != 1 else delta)
        weights.append(weight)
    if sparsifier is not None and rankings is None:  # a block's survey knows its whole tensor's fraction
        ctx.stats["kept_fraction"] = kept / (base.numel() * len(inputs)) if base.numel() else 1.0
    normalize = bool(ctx.params["normalize"])
    scale = float(ctx.params["lambda"])
    weight_divisor = _weight_divisor(weights)

    def combine(rows: slice) -> None:
        """Mix the weighted changes of `rows` and add the base there, in place in weighted[0]."""
        changes = [delta[rows] for delta in weighted]
        if consensus:
            mixed, divisor = _sign_consensus(changes, weights, scratch[rows], with_divisor=normalize)
        else:
            mixed, divisor = changes[0], weight_divisor
            for delta in changes[1:]:
                mixed.add_(delta)
        if normalize:
            mixed.div_(divisor)
        if scale != 1:
            mixed.mul_(scale)
        mixed.add_(base[rows])

    # From here on each entry depends on its own position alone: a block of a ranked tensor is mixed in two halves,
    # which the merge loop may run at once (MergeContext.run_each).
    ctx.run_each(combine, row_halves(base) if rankings is not None else [slice(None)])
    return weighted[0]


def merge_stored_plain(ctx: MergeContext) -> torch.Tensor:
    """Task arithmetic's merge (no sparsifier, no sign consensus) of inputs as stored, a chunk at a time
    (`merge_in_chunks`): the same operations in the same order as `merge_task_vectors`, so the same result bit for
    bit. Converting a whole block of each input first, then merging and rounding it, took 2.2 s of a 1 GB merge's
    CPU time; 1.5 s this way. Raises IncompatibleModelsError as `merge_task_vectors` does."""
    base = _base_of(ctx)
    inputs = ctx.non_base()
    if not inputs:
        return base
    weights = [float(ctx.model_params[i]["weight"]) for i in inputs]
    divisor = _weight_divisor(weights)
    normalize = bool(ctx.params["normalize"])
    scale = float(ctx.params["lambda"])

    def merge_chunk(chunks: list[torch.Tensor]) -> torch.Tensor:
        chunk_base = chunks[ctx.base_index]
        mixed = None
        for weight, i in zip(weights, inputs):
            delta = chunks[i].sub_(chunk_base)
            if weight != 1:
                delta.mul_(weight)
            mixed = delta if mixed is None else mixed.add_(delta)
        if normalize:
            mixed.div_(divisor)
        if scale != 1:
            mixed.mul_(scale)
        return mixed.add_(chunk_base)

    return merge_in_chunks(ctx.tensors, merge_chunk)


class _RankedSurvey(TensorSurvey):
    """TIES and Breadcrumbs a block at a time: every model's |δ| is ranked over the whole tensor first (usually two
    passes), then each block is merged with those rankings: the same result as the whole tensor gives."""

    def __init__(self, sparsifier: Sparsifier, consensus: bool, settings: TensorSettings) -> None:
        self._sparsifier = sparsifier
        self._consensus = consensus
        self._rankings = {
            i: _Ranking(sparsifier, params, settings.numel, settings.dtype)
            for i, params in enumerate(settings.model_params)
            if i != settings.base_index and float(params["density"]) < 1
        }
        inputs = [i for i in range(len(settings.model_params)) if i != settings.base_index]
        # Each ranking keeps an exact number of entries; a model that keeps all is not ranked.
        kept = sum(self._rankings[i].kept if i in self._rankings else settings.numel for i in inputs)
        self._kept_fraction = kept / (settings.numel * len(inputs)) if settings.numel and inputs else 1.0
        self._sampled = False  # whether the block being counted is the entries at sample_positions

    @property
    def passes_left(self) -> int:
        return _selection.passes_left(self._rankings.values())

    @property
    def samples_next_pass(self) -> bool:
        return any(ranking.samples_next_pass for ranking in self._rankings.values())

    def sample_positions(self, numel: int, block_numel: int | None = None) -> torch.Tensor | None:
        # Every ranking of the tensor draws its sample in the first pass, at the same positions.
        positions = next((r.sample_positions(numel, block_numel) for r in self._rankings.values() if r.passes_left),
                         None)
        self._sampled = positions is not None
        return positions

    def count(self, block: MergeContext) -> None:
        base, sampled = block.base, self._sampled

        def count_model(i: int) -> None:
            magnitudes = torch.sub(block.tensors[i], base).abs_()
            if sampled:  # |δ| of the sampled entries only: a 64th of the work
                self._rankings[i].count_sample(magnitudes)
            else:
                self._rankings[i].count(magnitudes)

        # Each model's ranking learns from its own |δ| alone: the models can be counted at once.
        block.run_each(count_model, [i for i, ranking in self._rankings.items() if ranking.passes_left])

    def end_pass(self) -> None:
        _selection.end_pass(self._rankings.values())

    def merge(self, block: MergeContext) -> torch.Tensor:
        merged = merge_task_vectors(block, self._sparsifier, self._consensus, self._rankings)
        block.stats["kept_fraction"] = self._kept_fraction
        return merged


def _ranked_survey(sparsifier: Sparsifier, consensus: bool) -> Callable[[TensorSettings], TensorSurvey | None]:
    def survey(settings: TensorSettings) -> TensorSurvey | None:
        # Rescaling needs the kept entries' L1 before any block is merged: a third pass, not worth it for an option
        # these methods leave off. A tensor without a base fails in merge_task_vectors, with its message.
        if settings.base_index is None or settings.params.get("rescale", False):
            return None
        return _RankedSurvey(sparsifier, consensus, settings)

    return survey


def task_vector_method(
    declaration: MethodDeclaration, *, sparsifier: Sparsifier | None, consensus: bool, working_copies: WorkingCopies
) -> MergeMethod:
    """Attach to one task-vector method's declaration its merge function (docs/spec/merge-methods.md §2)."""
    plain = sparsifier is None and not consensus
    return MergeMethod.implementing(
        declaration,
        merge=lambda ctx: merge_task_vectors(ctx, sparsifier, consensus),
        working_copies=working_copies,
        merge_stored=merge_stored_plain if plain else None,
        elementwise=plain,
        survey=_ranked_survey(sparsifier, consensus) if sparsifier in (Sparsifier.MAGNITUDE, Sparsifier.OUTLIERS) else None,
        **({"check_params": _check_della_params} if sparsifier is Sparsifier.DELLA else {}),
    )
