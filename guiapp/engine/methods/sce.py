"""SCE (Wan et al. 2024, FuseChat): Select high-variance entries, Calculate weights, Erase sign conflicts."""

from __future__ import annotations

import math

import torch

from guiapp.engine.methods import _reduce
from guiapp.engine.methods._selection import top_k_indicator
from guiapp.engine.methods.base import BaseRole, MergeContext, MergeMethod, ParamKind, ParamSpec, WorkingCopies
from guiapp.errors import IncompatibleModelsError

_WEIGHT_SUM_EPS = 1e-6
_DIVISOR_CLAMP = 1e-6


def high_variance(deltas: list[torch.Tensor], select_topk: float) -> torch.Tensor:
    """1.0 at the positions with the top int(count_nonzero(var)·select_topk) population variance across models,
    0.0 elsewhere (float32)."""
    mean = deltas[0].clone()
    for delta in deltas[1:]:
        mean.add_(delta)
    mean.div_(len(deltas))
    # Σ (δ_i − mean)² with one buffer for the differences between the first and the last, whose difference is taken
    # in `mean` itself (its square is the same): SCE works on whole tensors, and every buffer of a whole tensor is
    # memory the system maps and zeroes afresh.
    variance = torch.sub(deltas[0], mean).square_()
    difference = torch.empty_like(mean) if len(deltas) > 2 else None
    for delta in deltas[1:-1]:
        variance.add_(torch.sub(delta, mean, out=difference).square_())
    if len(deltas) > 1:
        variance.add_(mean.sub_(deltas[-1]).square_())
    del mean, difference
    variance.div_(len(deltas))
    return top_k_indicator(variance, int(int(torch.count_nonzero(variance)) * select_topk))


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
    energies = [_reduce.mean_square(delta) for delta in deltas]
    total_energy = math.fsum(energies)
    if total_energy < _WEIGHT_SUM_EPS:
        weights = [1.0 / len(deltas)] * len(deltas)
    else:
        weights = [e / total_energy for e in energies]
    total = deltas[0].clone()
    for delta in deltas[1:]:
        total.add_(delta)
    positive = total >= 0
    mixed = total.zero_()
    divisor = torch.zeros_like(base)
    # m_i as 1.0/0.0 in one float buffer: multiplying or adding a bool mask converts it into a new float tensor.
    agrees = torch.empty_like(base)
    for weight in weights:
        delta = deltas.pop(0)
        agrees.copy_(torch.where(positive, delta > 0, delta < 0))
        mixed.add_(delta.mul_(agrees), alpha=weight)
        divisor.add_(agrees, alpha=weight)
    return mixed.div_(divisor.clamp_(min=_DIVISOR_CLAMP)).add_(base)


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


METHOD = MergeMethod(
    name="sce",
    title="SCE (select, calculate, erase)",
    summary="Keeps the changes the models disagree on most, weights models by change size, drops sign conflicts.",
    paper="https://arxiv.org/abs/2408.07990",
    base_role=BaseRole.REQUIRED,
    params=(
        ParamSpec(
            "select_topk", ParamKind.FLOAT, default=1.0, minimum=0.0, maximum=1.0,
            help="Fraction of positions kept, those where the models differ most (1 keeps all).",
        ),
        ParamSpec(
            "int8_mask", ParamKind.BOOL, default=False,
            help="Accepted for mergekit recipes; only saves memory there, no effect on the result.",
        ),
    ),
    merge=merge,
    working_copies=WorkingCopies(0.5, 1.84),
)
