"""Multi-SLERP: barycentric interpolation of any number of models on the hypersphere (Goddard 2025)."""

from __future__ import annotations

import math

import torch

from guiapp.errors import IncompatibleModelsError, RecipeError
from guiapp.merging.method_declarations import MULTISLERP
from guiapp.merging.methods import _reduce
from guiapp.merging.methods.base import MergeContext, MergeMethod, WorkingCopies


def multislerp(
    tensors: list[torch.Tensor], weights: list[float], *, normalize_weights: bool, eps: float, where: str
) -> torch.Tensor:
    """Weighted spherical mean of `tensors` (task vectors or weights), scaled by their weighted mean norm.

    Unit vectors u_i = x_i/(‖x_i‖+eps) are averaged with the weights, projected back to the sphere through the
    tangent space at that mean, and scaled by Σ w_i‖x_i‖. When the weighted mean of the unit vectors vanishes
    (opposite inputs that balance out), two inputs fall back to w0·x0 + w1·x1; more raise
    IncompatibleModelsError naming `where`. Zero-sum weights with `normalize_weights` raise RecipeError.
    """
    if normalize_weights:
        total = sum(weights)
        if total == 0:
            raise RecipeError(
                f"The weights add up to zero at {where}, so they cannot be normalised.",
                hint="Change a weight, or set normalize_weights: false.",
                key=("parameters", "normalize_weights"),
            )
        weights = [w / total for w in weights]
    norms = [_reduce.norm(x) for x in tensors]
    # u_i = x_i · inverse_i; every weighted sum of unit vectors below is a weighted sum of the x_i.
    unit_weights = [w / (n + eps) for w, n in zip(weights, norms)]
    mean = tensors[0] * unit_weights[0]
    for x, unit_weight in zip(tensors[1:], unit_weights[1:]):
        mean.add_(x, alpha=unit_weight)
    mean_norm = _reduce.norm(mean)
    if mean_norm < eps:
        if len(tensors) == 2:
            return torch.add(tensors[0] * weights[0], tensors[1], alpha=weights[1])
        raise IncompatibleModelsError(
            f"Multi-SLERP cannot merge {where}: the weighted directions of the models cancel out exactly "
            "(for example a tensor and its negation with equal weights).",
            hint="Change the weights so the models do not balance out, or use linear or task_arithmetic.",
        )
    mean.div_(mean_norm)
    # The tangent vectors at the mean m: τ = Σ w_i (u_i − (u_i·m) m) = Σ w_i u_i − (Σ w_i u_i·m) m.
    projection = math.fsum(uw * d for uw, d in zip(unit_weights, _reduce.dots(mean, tensors)))
    tangent = mean * -projection
    for x, unit_weight in zip(tensors, unit_weights):
        tangent.add_(x, alpha=unit_weight)
    tangent_norm = _reduce.norm(tangent) + eps
    result = mean.mul_(math.cos(tangent_norm)).add_(tangent, alpha=math.sin(tangent_norm) / tangent_norm)
    return result.mul_(math.fsum(w * n for w, n in zip(weights, norms)))


def merge(ctx: MergeContext) -> torch.Tensor:
    inputs = ctx.non_base()
    if len(inputs) == 1:
        return ctx.tensors[inputs[0]]
    base = ctx.base
    tensors = [ctx.tensors[i] if base is None else ctx.tensors[i] - base for i in inputs]
    result = multislerp(
        tensors,
        [float(ctx.model_params[i]["weight"]) for i in inputs],
        normalize_weights=bool(ctx.params["normalize_weights"]),
        eps=float(ctx.params["eps"]),
        where=ctx.tensor_name,
    )
    return result if base is None else result.add_(base)


def _check_inputs(n_non_base: int, has_base: bool) -> str | None:
    return None if n_non_base >= 1 else "Multi-SLERP needs at least one model besides the base"


METHOD = MergeMethod.implementing(
    MULTISLERP,
    merge=merge,
    working_copies=WorkingCopies(0.0, 1.42),
    check_inputs=_check_inputs,
)
