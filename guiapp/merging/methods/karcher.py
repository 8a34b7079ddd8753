"""Karcher mean: the Riemannian (geodesic) mean of the models' directions on the hypersphere."""

from __future__ import annotations

import math

import torch

from guiapp.merging.method_declarations import KARCHER
from guiapp.merging.methods import _reduce
from guiapp.merging.methods.base import MergeContext, MergeMethod, WorkingCopies


def karcher_mean(tensors: list[torch.Tensor], *, max_iter: int, tol: float) -> torch.Tensor:
    """The Karcher mean of the unit directions of `tensors` (equal weights), scaled by their mean norm.

    Inputs with norm <= tol are left out of the direction (the other weights renormalised) but still count in
    the mean norm; all of them that small gives zeros. Iterates at most `max_iter` Riemannian gradient steps,
    stopping when the step is shorter than `tol`.
    """
    if len(tensors) == 1:
        return tensors[0]
    alpha = 1.0 / len(tensors)
    norms = [_reduce.norm(x) for x in tensors]
    valid = [(x, n) for x, n in zip(tensors, norms) if n > tol]
    if not valid:
        return torch.zeros_like(tensors[0])
    weight = 1.0 / len(valid)
    # Unit vectors are never materialised: u_i = x_i / ‖x_i‖, so every sum of them is a sum of the x_i.
    mean = valid[0][0] * (weight / valid[0][1])
    for x, n in valid[1:]:
        mean.add_(x, alpha=weight / n)
    mean_norm = _reduce.norm(mean)
    if mean_norm < tol:
        mean = valid[0][0] / valid[0][1]
    else:
        mean.div_(mean_norm)
    for _ in range(max_iter):
        # T = Σ α_i θ_i/sin θ_i (u_i − cos θ_i · mean), over the inputs not already at the mean.
        tangent = torch.zeros_like(mean)
        mean_coefficient = 0.0
        for (x, n), crossed in zip(valid, _reduce.dots(mean, [x for x, _ in valid])):
            cos = max(-1.0, min(1.0, crossed / n))
            theta = math.acos(cos)
            if theta < tol:
                continue
            scale = weight * theta / math.sin(theta)
            tangent.add_(x, alpha=scale / n)
            mean_coefficient -= scale * cos
        tangent.add_(mean, alpha=mean_coefficient)
        step = _reduce.norm(tangent)
        if step < tol:
            break
        mean.mul_(math.cos(step)).add_(tangent, alpha=math.sin(step) / step)
        length = _reduce.norm(mean)
        if length > tol:
            mean.div_(length)
    return mean.mul_(math.fsum(alpha * n for n in norms))


def merge(ctx: MergeContext) -> torch.Tensor:
    return karcher_mean(ctx.tensors, max_iter=int(ctx.params["max_iter"]), tol=float(ctx.params["tol"]))


METHOD = MergeMethod.implementing(
    KARCHER,
    merge=merge,
    working_copies=WorkingCopies(0.25, 1.0),
)
