"""Reinforced Agent Merging (ram, ramplus_tl): average task vectors only where several models changed."""

from __future__ import annotations

import torch

from guiapp.errors import IncompatibleModelsError
from guiapp.merging.method_declarations import RAM, RAMPLUS_TL
from guiapp.merging.methods.base import MergeContext, MergeMethod, TensorSettings, TensorSurvey, WorkingCopies


def _activity(
    base: torch.Tensor, tensors: list[torch.Tensor], epsilon: float
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """(δ_i, model i active (|δ_i| > epsilon), where exactly one model is active, where several are, a float buffer
    of the base's shape holding 1/count where several are and 1 elsewhere: the share of each active model)."""
    deltas = [x - base for x in tensors]
    scratch = torch.empty_like(base)
    active = [torch.abs(delta, out=scratch) > epsilon for delta in deltas]
    counts = torch.zeros(base.shape, dtype=torch.uint8, device=base.device)
    for mask in active:
        counts.add_(mask)
    unique = counts == 1
    shared = counts > 1
    share = scratch.copy_(counts.clamp_(min=1)).reciprocal_()
    return deltas, active, unique, shared, share


def _overlap(active: list[torch.Tensor], unique: torch.Tensor, shared: torch.Tensor) -> list[tuple[int, int]]:
    """Each model's (unique, shared) active counts."""
    return [(int(torch.count_nonzero(mask & unique)), int(torch.count_nonzero(mask & shared))) for mask in active]


def boosts(overlap: list[tuple[int, int]], *, epsilon: float, r: float, alpha: float) -> list[float]:
    """RAM+'s factor for each model's unique changes, from its (unique, shared) active counts over the tensor:
    1 + r·clip(shared / max(unique, epsilon), 0, alpha)."""
    return [1.0 + r * min(max(n_shared / max(n_unique, epsilon), 0.0), alpha) for n_unique, n_shared in overlap]


def ram(
    base: torch.Tensor, tensors: list[torch.Tensor], *, epsilon: float, boost: list[float] | None = None
) -> torch.Tensor:
    """Merge task vectors entry by entry by how many models changed it (|δ_i| > epsilon: "active").

    One active model: its δ, times its `boost` (RAM+; see `boosts`) or 1 without one (RAM); several: their mean;
    none: the base.
    """
    deltas, active, unique, shared, share = _activity(base, tensors, epsilon)
    del shared
    return _combine(base, deltas, active, unique, share, boost=boost)


def _combine(
    base: torch.Tensor, deltas: list[torch.Tensor], active: list[torch.Tensor], unique: torch.Tensor,
    share: torch.Tensor, *, boost: list[float] | None
) -> torch.Tensor:
    """`ram` from the `_activity` of its inputs (whose deltas this changes in place)."""
    # The masks and the boosted factors as floats in two buffers used for every model: a bool mask multiplied in is
    # converted into a new float tensor first, and every buffer of a whole tensor is memory the system maps and
    # zeroes afresh.
    kept = torch.empty_like(base)
    boosted = torch.empty_like(base) if boost else None
    merged: torch.Tensor | None = None
    for index, (delta, mask) in enumerate(zip(deltas, active)):
        factor = share
        if boost:
            factor = torch.where(unique, torch.tensor(boost[index], dtype=share.dtype, device=share.device), share,
                                 out=boosted)
        delta.mul_(kept.copy_(mask)).mul_(factor)
        merged = delta if merged is None else merged.add_(delta)
    return merged.add_(base)


def _merge(ctx: MergeContext, *, boosted: bool) -> torch.Tensor:
    base = ctx.base
    if base is None:
        raise IncompatibleModelsError(
            f"{ctx.tensor_name} is missing from the base model, and RAM measures every change against the base.",
            hint="Choose a base model that has this tensor.",
        )
    inputs = ctx.non_base()
    if not inputs:
        return base
    epsilon = float(ctx.params["epsilon"])
    deltas, active, unique, shared, share = _activity(base, [ctx.tensors[i] for i in inputs], epsilon)
    boost = None
    if boosted and float(ctx.params["r"]):
        boost = boosts(_overlap(active, unique, shared), epsilon=epsilon, r=float(ctx.params["r"]),
                       alpha=float(ctx.params["alpha"]))
    del shared
    return _combine(base, deltas, active, unique, share, boost=boost)


class _OverlapSurvey(TensorSurvey):
    """RAM+ a block at a time: one pass counts each model's unique and shared active entries over the whole tensor,
    then each block is merged with the boosts those counts give: the same result as the whole tensor gives."""

    def __init__(self, settings: TensorSettings) -> None:
        self._params = settings.params
        self._overlap: list[tuple[int, int]] | None = None
        self._boost: list[float] = []
        # A tensor only the base has is the base's: nothing to count.
        self._passes_left = 1 if len(settings.model_params) > 1 else 0

    @property
    def passes_left(self) -> int:
        return self._passes_left

    def count(self, block: MergeContext) -> None:
        inputs = block.non_base()
        _, active, unique, shared, _ = _activity(block.base, [block.tensors[i] for i in inputs],
                                                 float(self._params["epsilon"]))
        counted = _overlap(active, unique, shared)
        self._overlap = counted if self._overlap is None else [
            (unique_before + n_unique, shared_before + n_shared)
            for (unique_before, shared_before), (n_unique, n_shared) in zip(self._overlap, counted)
        ]

    def end_pass(self) -> None:
        self._passes_left = 0
        self._boost = boosts(self._overlap, epsilon=float(self._params["epsilon"]), r=float(self._params["r"]),
                             alpha=float(self._params["alpha"]))

    def merge(self, block: MergeContext) -> torch.Tensor:
        inputs = block.non_base()
        if not inputs:
            return block.base
        return ram(block.base, [block.tensors[i] for i in inputs], epsilon=float(self._params["epsilon"]),
                   boost=self._boost)


def _overlap_survey(settings: TensorSettings) -> TensorSurvey | None:
    # Without a base (an error, from `_merge`) or a boost there is nothing to count: the whole path.
    if settings.base_index is None or not float(settings.params["r"]):
        return None
    return _OverlapSurvey(settings)


def ram_method(*, boosted: bool) -> MergeMethod:
    """RAM (boosted=False) or RAM+ tensor-local (boosted=True, with r and alpha)."""
    return MergeMethod.implementing(
        RAMPLUS_TL if boosted else RAM,
        merge=lambda ctx: _merge(ctx, boosted=boosted),
        working_copies=WorkingCopies(0.0, 2.92) if boosted else WorkingCopies(0.0, 2.67),
        # RAM computes each entry from the inputs' entries there alone; RAM+ counts over the tensor's blocks first.
        elementwise=not boosted,
        survey=_overlap_survey if boosted else None,
    )
