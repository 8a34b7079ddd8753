"""NuSLERP: SLERP of two models by weight, over the whole tensor or row by row, optionally on task vectors."""

from __future__ import annotations

import torch

from guiapp.errors import IncompatibleModelsError
from guiapp.merging.method_declarations import NUSLERP
from guiapp.merging.methods import _reduce
from guiapp.merging.methods.base import LoneTensorPolicy, MergeContext, MergeMethod, WorkingCopies

_NORM_CLAMP = 1e-7
# Vectors count as parallel (plain interpolation) only when sin²θ = 1 − cos²θ is at float64 rounding level.
_PARALLEL_SIN2 = 1e-16
_WEIGHT_SUM_EPS = 1e-6


def nuslerp(t: float, v0: torch.Tensor, v1: torch.Tensor, *, flatten: bool, row_wise: bool) -> torch.Tensor:
    """Slerp `v0` (t = 0) to `v1` (t = 1) as one flattened vector, or per vector along the last dim
    (`row_wise=False`) or along the first dim (`row_wise=True`: the columns of a matrix).

    Coefficients are computed per vector in float64; (numerically) parallel vectors are interpolated linearly.
    """
    dim = 0 if row_wise and not flatten else -1
    a, b = (v0.reshape(1, -1), v1.reshape(1, -1)) if flatten else (v0, v1)
    squares_a, squares_b, crossed = _reduce.vector_gram(a, b, dim)
    norms = squares_a.sqrt_().clamp_(min=_NORM_CLAMP) * squares_b.sqrt_().clamp_(min=_NORM_CLAMP)
    cos = crossed.div_(norms).clamp_(-1.0, 1.0)
    theta = torch.acos(cos)
    parallel = 1.0 - cos * cos <= _PARALLEL_SIN2
    sin_theta = torch.where(parallel, torch.ones_like(theta), torch.sin(theta))
    c0 = torch.where(parallel, torch.full_like(cos, 1.0 - t), torch.sin((1.0 - t) * theta) / sin_theta)
    c1 = torch.where(parallel, torch.full_like(cos, t), torch.sin(t * theta) / sin_theta)
    c0, c1 = (c.to(a.dtype).unsqueeze(dim) for c in (c0, c1))
    return (a * c0).addcmul_(b, c1).reshape(v0.shape)


def merge(ctx: MergeContext) -> torch.Tensor:
    inputs = ctx.non_base()
    if len(inputs) != 2:
        raise IncompatibleModelsError(
            f"NuSLERP needs two models besides the base for {ctx.tensor_name}, but only "
            f"{len(inputs)} of them have it.",
            hint="Use models that all have this tensor, or a method that merges what is available (e.g. ties).",
        )
    first, second = inputs
    w1, w2 = float(ctx.model_params[first]["weight"]), float(ctx.model_params[second]["weight"])
    t = 0.5 if abs(w1 + w2) < _WEIGHT_SUM_EPS else w2 / (w1 + w2)
    options = dict(flatten=bool(ctx.params["nuslerp_flatten"]), row_wise=bool(ctx.params["nuslerp_row_wise"]))
    base = ctx.base
    if base is None:
        return nuslerp(t, ctx.tensors[first], ctx.tensors[second], **options)
    return nuslerp(t, ctx.tensors[first] - base, ctx.tensors[second] - base, **options).add_(base)


def _check_inputs(n_non_base: int, has_base: bool) -> str | None:
    if n_non_base == 2:
        return None
    return (
        "NuSLERP blends exactly two models plus an optional base_model (to combine more, use multislerp), "
        f"but the recipe has {n_non_base} model{'' if n_non_base == 1 else 's'} besides the base"
    )


METHOD = MergeMethod.implementing(
    NUSLERP,
    merge=merge,
    working_copies=WorkingCopies(0.0, 2.0),
    lone_tensor=LoneTensorPolicy.COPY_ONLY_COPY,
    check_inputs=_check_inputs,
)
