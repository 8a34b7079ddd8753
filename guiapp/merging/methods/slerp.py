"""SLERP: spherical linear interpolation between the base and one other model (Shoemake 1985)."""

from __future__ import annotations

import math

import torch

from guiapp.merging.method_declarations import SLERP
from guiapp.merging.methods import _reduce
from guiapp.merging.methods._input_rules import base_and_one_model
from guiapp.merging.methods.base import LoneTensorPolicy, MergeContext, MergeMethod, WorkingCopies

# Above this cosine the angle is too small for sin θ to divide by safely; plain interpolation is as good.
_PARALLEL_DOT = 0.9995
# mergekit only normalises vectors longer than this; shorter ones enter the dot product as they are.
_NORM_EPS = 1e-8


def slerp(t: float, x0: torch.Tensor, x1: torch.Tensor) -> torch.Tensor:
    """Interpolate from `x0` (t = 0) to `x1` (t = 1) along the great circle between their directions.

    The angle comes from the flattened tensors' unit vectors (float64 dot product); the weights apply to the
    un-normalised tensors. Nearly parallel or antiparallel (|cos| > 0.9995) falls back to linear interpolation.
    """
    square0, square1, crossed = _reduce.gram(x0, x1)
    n0, n1 = math.sqrt(square0), math.sqrt(square1)
    cos = crossed / (n0 if n0 > _NORM_EPS else 1.0) / (n1 if n1 > _NORM_EPS else 1.0)
    if abs(cos) > _PARALLEL_DOT:
        return torch.lerp(x0, x1, t)
    theta = math.acos(cos)
    sin_theta = math.sin(theta)
    return (x0 * (math.sin((1 - t) * theta) / sin_theta)).add_(x1, alpha=math.sin(t * theta) / sin_theta)


def merge(ctx: MergeContext) -> torch.Tensor:
    (other,) = ctx.non_base()
    return slerp(float(ctx.params["t"]), ctx.tensors[ctx.base_index], ctx.tensors[other])


METHOD = MergeMethod.implementing(
    SLERP,
    merge=merge,
    mergekit_float32=True,
    working_copies=WorkingCopies(0.0, 0.85),
    lone_tensor=LoneTensorPolicy.COPY_ONLY_COPY,
    check_inputs=base_and_one_model("SLERP"),
)
