"""SCE (Wan et al. 2024, FuseChat): Select high-variance entries, Calculate weights, Erase sign conflicts."""

from __future__ import annotations

import enum
import math

import torch

from guiapp.errors import IncompatibleModelsError
from guiapp.merging.method_declarations import SCE
from guiapp.merging.methods import _reduce
from guiapp.merging.methods._selection import LargestK, top_k_indicator
from guiapp.merging.methods._task_vectors import elect_signs, sum_in_order
from guiapp.merging.methods.base import (
    MergeContext,
    MergeMethod,
    TensorSettings,
    TensorSurvey,
    WorkingCopies,
    row_halves,
)

_WEIGHT_SUM_EPS = 1e-6
_DIVISOR_CLAMP = 1e-6
_ZERO = torch.tensor(0.0, dtype=torch.float32)


def _variance(deltas: list[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """The population variance across models at each position, in `out` or a new tensor."""
    mean = sum_in_order(deltas).div_(len(deltas))
    # Σ (δ_i − mean)² with one buffer for the differences between the first and the last, whose difference is taken
    # in `mean` itself (its square is the same): every buffer of a whole tensor is memory the system maps and zeroes
    # afresh.
    variance = torch.sub(deltas[0], mean, out=out).square_()
    difference = torch.empty_like(mean) if len(deltas) > 2 else None
    for delta in deltas[1:-1]:
        variance.add_(torch.sub(delta, mean, out=difference).square_())
    if len(deltas) > 1:
        variance.add_(mean.sub_(deltas[-1]).square_())
    del mean, difference
    return variance.div_(len(deltas))


def _selected_count(varied: int, select_topk: float) -> int:
    """How many positions SCE keeps, of the `varied` ones where the models' changes differ."""
    return int(varied * select_topk)


def high_variance(deltas: list[torch.Tensor], select_topk: float) -> torch.Tensor:
    """1.0 at the positions with the top int(count_nonzero(var)·select_topk) population variance across models,
    0.0 elsewhere (float32)."""
    variance = _variance(deltas)
    return top_k_indicator(variance, _selected_count(int(torch.count_nonzero(variance)), select_topk))


def _weights(energies: list[float]) -> list[float]:
    """w_i = e_i / Σ e_j from each model's mean squared kept change e_i; uniform when Σ e_j is below 1e-6."""
    total_energy = math.fsum(energies)
    if total_energy < _WEIGHT_SUM_EPS:
        return [1.0 / len(energies)] * len(energies)
    return [energy / total_energy for energy in energies]


def _erase_and_mix(base: torch.Tensor, deltas: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    """b + Σ w_i m_i δ_i / clamp(Σ w_i m_i, 1e-6), m_i keeping the entries whose sign agrees with the sign of Σ δ_j
    (0 counts as +; a zero entry never agrees). Changes `deltas` in place: the result is deltas[0]."""
    elected = elect_signs(deltas)
    # With s = ±1, relu(s·δ) is |δ| where δ agrees with s and 0 elsewhere (exact: s·δ only flips a sign), and its
    # sign is m; summing w·|δ| and multiplying by s at the end gives Σ w m δ. Several times faster on CPU than masks
    # chosen with torch.where.
    # The first model's terms start the sums (w·x is what 0 + w·x rounds to), which saves two buffers of zeros.
    mixed = deltas[0].mul_(elected).clamp_(min=0)
    divisor = torch.sign(mixed).mul_(weights[0])
    mixed.mul_(weights[0])
    agrees = torch.empty_like(base) if len(deltas) > 1 else None
    for delta, weight in zip(deltas[1:], weights[1:]):
        magnitude = delta.mul_(elected).clamp_(min=0)
        mixed.add_(magnitude, alpha=weight)
        divisor.add_(torch.sign(magnitude, out=agrees), alpha=weight)
    # 0 + s·Σ: where no model agrees the sum is ±0.0, and the merged change +0.0, as it was when masks chose.
    signed = torch.addcmul(_ZERO, mixed, elected, out=mixed)
    return signed.div_(divisor.clamp_(min=_DIVISOR_CLAMP)).add_(base)


def sce(base: torch.Tensor, tensors: list[torch.Tensor], *, select_topk: float) -> torch.Tensor:
    """b + Σ w_i m_i δ_i / clamp(Σ w_i m_i, 1e-6), after keeping only the high-variance positions.

    w_i = mean(δ_i²)/Σ_j mean(δ_j²) (uniform when that sum is below 1e-6); m_i keeps the entries whose sign
    agrees with the sign of Σ δ_j (0 counts as +; a zero entry never agrees). select_topk <= 0 gives the base.
    """
    if select_topk <= 0:
        return base
    deltas = [x - base for x in tensors]
    if select_topk < 1:
        selected = high_variance(deltas, select_topk)
        for delta in deltas:
            delta.mul_(selected)
        del selected
    return _erase_and_mix(base, deltas, _weights([_reduce.mean_square(delta) for delta in deltas]))


class _Stage(enum.Enum):
    RANKING = "rank the variance, counting where it is not 0"
    ENERGY = "sum each model's squared kept changes"
    MERGE = "merge"


class _SelectionSurvey(TensorSurvey):
    """SCE a block at a time. `LargestK`'s passes (usually two) rank the variance across models while counting the
    positions where it is not 0, of which the selection keeps a fraction; one more pass sums each model's squared
    kept changes, which give the weights. Then each block is merged with that selection and those weights: the same
    result as the whole tensor gives."""

    def __init__(self, settings: TensorSettings) -> None:
        self._numel, self._dtype = settings.numel, settings.dtype
        self._select_topk = float(settings.params["select_topk"])
        self._squares = [_reduce.SquareSum(settings.numel) for _ in range(len(settings.model_params) - 1)]
        self._weights: list[float] = []
        self._selection: LargestK | None = None
        self._nonzero = self._shown = 0  # variances not 0, of those shown in the current pass
        self._sampled = False  # whether the block being counted is the entries at sample_positions
        if not self._squares or self._select_topk <= 0:
            self._stage = _Stage.MERGE  # the base's own tensor, or a selection of nothing: the base
            return
        self._stage = _Stage.ENERGY
        if self._select_topk < 1:
            # Ranked for as many as it may keep (every variance not 0); it learns how many while it ranks (`settle`).
            self._selection = LargestK(self._numel, _selected_count(self._numel, self._select_topk), self._dtype)
            if self._selection.passes_left:
                self._stage = _Stage.RANKING

    @property
    def passes_left(self) -> int:
        if self._stage is _Stage.RANKING:
            return self._selection.passes_left + 1
        return 0 if self._stage is _Stage.MERGE else 1

    @property
    def samples_next_pass(self) -> bool:
        return self._stage is _Stage.RANKING and self._selection.samples_next_pass

    def sample_positions(self, numel: int, block_numel: int | None = None) -> torch.Tensor | None:
        positions = self._selection.sample_positions(numel, block_numel) if self._stage is _Stage.RANKING else None
        self._sampled = positions is not None
        return positions

    def count(self, block: MergeContext) -> None:
        deltas, variance = _deltas_and_variance(block, with_variance=self._selection is not None)
        if self._stage is _Stage.RANKING:
            self._nonzero += int(torch.count_nonzero(variance))
            self._shown += variance.numel()
            (self._selection.count_sample if self._sampled else self._selection.count)(variance)
            return
        selected = self._selection.indicator(variance) if self._selection is not None else None

        def add_squares(model: int) -> None:
            if selected is not None:
                deltas[model].mul_(selected)
            self._squares[model].add(deltas[model])

        # Each model's sum is its own: the models are summed at once.
        block.run_each(add_squares, range(len(deltas)))

    def end_pass(self) -> None:
        if self._stage is _Stage.RANKING:
            # The sample's share of variances not 0 estimates how many the selection keeps, where the bracket is
            # drawn; a pass over every entry counts them: k is exact then.
            nonzero = round(self._numel * self._nonzero / self._shown) if self._selection.samples_next_pass \
                else self._nonzero
            self._selection.settle(_selected_count(nonzero, self._select_topk))
            self._nonzero = self._shown = 0
            self._selection.end_pass()
            if not self._selection.passes_left:
                self._stage = _Stage.ENERGY
        else:
            self._weights = _weights([squares.total() / self._numel for squares in self._squares])
            self._squares = []
            if self._selection is not None:
                self._selection.rewind()
            self._stage = _Stage.MERGE

    def merge(self, block: MergeContext) -> torch.Tensor:
        if not self._weights:
            return block.base
        deltas, variance = _deltas_and_variance(block, with_variance=self._selection is not None)
        selected = self._selection.indicator(variance) if self._selection is not None else None
        del variance

        def mix(rows: slice) -> None:
            changes = [delta[rows] for delta in deltas]
            if selected is not None:
                for change in changes:
                    change.mul_(selected[rows])
            _erase_and_mix(block.base[rows], changes, self._weights)  # in place in deltas[0]

        block.run_each(mix, row_halves(block.base))
        return deltas[0]


def _deltas_and_variance(
    block: MergeContext, *, with_variance: bool
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """The block's changes (one buffer per model) and, `with_variance`, their variance across models; entries depend
    on their own position alone, so the two halves of the block are computed at once (MergeContext.run_each)."""
    base = block.base
    tensors = [block.tensors[i] for i in block.non_base()]
    deltas = [torch.empty_like(base) for _ in tensors]
    variance = torch.empty_like(base) if with_variance else None

    def compute(rows: slice) -> None:
        changes = [torch.sub(tensor[rows], base[rows], out=delta[rows]) for tensor, delta in zip(tensors, deltas)]
        if variance is not None:
            _variance(changes, out=variance[rows])

    block.run_each(compute, row_halves(base))
    return deltas, variance


def _selection_survey(settings: TensorSettings) -> TensorSurvey | None:
    # Without a base SCE fails in `merge`, with its message.
    return None if settings.base_index is None else _SelectionSurvey(settings)


def merge(ctx: MergeContext) -> torch.Tensor:
    base = ctx.base
    if base is None:
        raise IncompatibleModelsError(
            f"{ctx.tensor_name} is missing from the base model, and SCE measures every change against the base.",
            hint="Choose a base model that has this tensor.",
        )
    inputs = ctx.non_base()
    if not inputs:
        return base
    return sce(base, [ctx.tensors[i] for i in inputs], select_topk=float(ctx.params["select_topk"]))


METHOD = MergeMethod.implementing(
    SCE,
    merge=merge,
    working_copies=WorkingCopies(0.5, 1.84),
    survey=_selection_survey,
)
