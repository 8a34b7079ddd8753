"""Reinforced Agent Merging (ram, ramplus_tl): average task vectors only where several models changed."""

from __future__ import annotations

import torch

from guiapp.engine.methods.base import BaseRole, MergeContext, MergeMethod, ParamKind, ParamSpec, WorkingCopies
from guiapp.errors import IncompatibleModelsError


def ram(
    base: torch.Tensor, tensors: list[torch.Tensor], *, epsilon: float, r: float = 0.0, alpha: float = 0.0
) -> torch.Tensor:
    """Merge task vectors entry by entry by how many models changed it (|δ_i| > epsilon: "active").

    One active model: its δ, times 1 + r·clip(ρ_i, 0, alpha) where ρ_i = model i's shared active count over
    its unique active count (at least epsilon); several: their mean; none: the base. r = 0 is plain RAM.
    """
    deltas = [x - base for x in tensors]
    scratch = torch.empty_like(base)
    active = [torch.abs(delta, out=scratch) > epsilon for delta in deltas]
    counts = torch.zeros(base.shape, dtype=torch.uint8, device=base.device)
    for mask in active:
        counts.add_(mask)
    unique = counts == 1
    shared = counts > 1
    # 1/count where several models are active (and 1 where one is): the share of each active model.
    share = scratch.copy_(counts.clamp_(min=1)).reciprocal_()
    del counts
    # The masks and the boosted factors as floats in two buffers used for every model: a bool mask multiplied in is
    # converted into a new float tensor first, and every buffer of a whole tensor is memory the system maps and
    # zeroes afresh.
    kept = torch.empty_like(base)
    boosted = torch.empty_like(base) if r else None
    merged: torch.Tensor | None = None
    for delta, mask in zip(deltas, active):
        factor = share
        if r:
            n_unique = int(torch.count_nonzero(mask & unique))
            n_shared = int(torch.count_nonzero(mask & shared))
            boost = 1.0 + r * min(max(n_shared / max(n_unique, epsilon), 0.0), alpha)
            factor = torch.where(unique, torch.tensor(boost, dtype=share.dtype, device=share.device), share,
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
    extra = dict(r=float(ctx.params["r"]), alpha=float(ctx.params["alpha"])) if boosted else {}
    return ram(base, [ctx.tensors[i] for i in inputs], epsilon=float(ctx.params["epsilon"]), **extra)


_EPSILON = ParamSpec(
    "epsilon", ParamKind.FLOAT, default=1e-5, minimum=0.0, maximum=1.0,
    help="A change larger than this counts as the model having changed that weight.",
)


def ram_method(*, boosted: bool) -> MergeMethod:
    """RAM (boosted=False) or RAM+ tensor-local (boosted=True, with r and alpha)."""
    params = [_EPSILON]
    if boosted:
        params += [
            ParamSpec(
                "r", ParamKind.FLOAT, default=0.1, minimum=0.0, maximum=10.0,
                help="How much a model's unique changes are boosted for the changes it shares.",
            ),
            ParamSpec(
                "alpha", ParamKind.FLOAT, default=0.2, minimum=0.0, maximum=10.0,
                help="Cap on the shared-to-unique ratio used for the boost.",
            ),
        ]
    return MergeMethod(
        name="ramplus_tl" if boosted else "ram",
        title="RAM+ (tensor-local)" if boosted else "RAM (reinforced agent merging)",
        summary=(
            "Like RAM, and boosts each model's unique changes by how much it also shares with the others."
            if boosted
            else "Keeps each model's unique changes as they are and averages changes several models made."
        ),
        paper="https://arxiv.org/abs/2601.13572",
        base_role=BaseRole.REQUIRED,
        params=tuple(params),
        merge=lambda ctx: _merge(ctx, boosted=boosted),
        working_copies=WorkingCopies(0.0, 2.92) if boosted else WorkingCopies(0.0, 2.67),
        # RAM computes each entry from the inputs' entries there alone; RAM+'s boost counts over the whole tensor.
        elementwise=not boosted,
    )
