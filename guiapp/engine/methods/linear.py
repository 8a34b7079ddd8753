"""Linear: the weighted average of the inputs (Wortsman et al. 2022, "Model soups")."""

from __future__ import annotations

from typing import Any

import torch

from guiapp.engine.methods.base import BaseRole, MergeContext, MergeMethod, ParamKind, ParamSpec, WorkingCopies
from guiapp.errors import RecipeError


def merge(ctx: MergeContext) -> torch.Tensor:
    weights = [float(p["weight"]) for p in ctx.model_params]
    result = ctx.tensors[0] * weights[0]
    for weight, tensor in zip(weights[1:], ctx.tensors[1:]):
        result.add_(tensor, alpha=weight)
    total = sum(weights)  # a zero sum is refused by check_params, tensor by tensor
    if ctx.params["normalize"] and total != 1:
        # Weights that add up to one (the usual recipe) leave every entry as it is: no pass over the block for that.
        result.div_(total)
    return result


def merge_stored(ctx: MergeContext) -> torch.Tensor:
    """Two bf16 or fp16 inputs averaged (normalised, or with weights that add up to one; `stores_with`): one pass
    of torch.lerp, which reads both as stored, computes each entry in float32 and rounds it once. Converting both to
    float32, weighting, adding and converting back took about two thirds of the merge step's CPU time."""
    first, second = (float(p["weight"]) for p in ctx.model_params)
    return torch.lerp(ctx.tensors[0], ctx.tensors[1], second / (first + second))


def stores_with(model_params: list[dict[str, Any]], params: dict[str, Any], dtype: torch.dtype) -> bool:
    """Whether `merge_stored` merges these: two inputs in bf16 or fp16 (lerp in float32 would round differently
    from the float32 path), averaged (a zero sum is refused by check_params when normalising)."""
    if len(model_params) != 2 or dtype not in (torch.bfloat16, torch.float16):
        return False
    return bool(params["normalize"]) or sum(float(p["weight"]) for p in model_params) == 1


def check_params(model_params: list[dict[str, Any]], params: dict[str, Any], tensor_name: str) -> None:
    """Refuse normalising by weights that cancel out (RecipeError): the result would be a division by zero."""
    if params["normalize"] and abs(sum(p["weight"] for p in model_params)) < 1e-8:
        raise RecipeError(
            f"The weights add up to zero for {tensor_name}, so linear cannot normalise by them.",
            hint="Change the weights so that they do not cancel out, or set `normalize: false`.",
            key=("parameters", "normalize"),
        )


METHOD = MergeMethod(
    name="linear",
    title="Linear (weighted average)",
    summary="Averages the models' weights, each scaled by its weight.",
    paper="https://arxiv.org/abs/2203.05482",
    base_role=BaseRole.INPUT,
    params=(
        ParamSpec("weight", ParamKind.FLOAT, required=True, per_model=True, help="How much this model counts."),
        ParamSpec("normalize", ParamKind.BOOL, default=True, help="Divide by the sum of the weights."),
    ),
    merge=merge,
    working_copies=WorkingCopies(1.0, 0.0),
    check_params=check_params,
    merge_stored=merge_stored,
    stores_with=stores_with,
    elementwise=True,
)
