"""Linear: the weighted average of the inputs (Wortsman et al. 2022, "Model soups")."""

from __future__ import annotations

from typing import Any

import torch

from guiapp.errors import RecipeError
from guiapp.merging.method_declarations import LINEAR
from guiapp.merging.methods._stored import merge_in_chunks
from guiapp.merging.methods.base import MergeContext, MergeMethod, WorkingCopies


def merge(ctx: MergeContext) -> torch.Tensor:
    weights = [float(p["weight"]) for p in ctx.model_params]
    return _weighted_sum(ctx.tensors[0] * weights[0], ctx.tensors[1:], weights, bool(ctx.params["normalize"]))


def _weighted_sum(first: torch.Tensor, others: list[torch.Tensor], weights: list[float], normalize: bool) -> torch.Tensor:
    """Σ wᵢ·xᵢ, divided by Σ wᵢ when normalising, in place in `first` (x₀ already weighted)."""
    for weight, tensor in zip(weights[1:], others):
        first.add_(tensor, alpha=weight)
    total = sum(weights)  # a zero sum is refused by check_params, tensor by tensor
    if normalize and total != 1:
        # Weights that add up to one (the usual recipe) leave every entry as it is: no pass over the block for that.
        first.div_(total)
    return first


def merge_stored(ctx: MergeContext) -> torch.Tensor:
    """`merge` of bf16 or fp16 inputs as stored. Two inputs averaged (normalised, or with weights that add up to one):
    one pass of torch.lerp, which reads both as stored, computes each entry in float32 and rounds it once (converting
    both to float32, weighting, adding and converting back took about two thirds of the merge step's CPU time).
    Otherwise a chunk at a time (`merge_in_chunks`) through `merge`'s operations: the same result bit for bit."""
    weights = [float(p["weight"]) for p in ctx.model_params]
    normalize = bool(ctx.params["normalize"])
    if len(weights) == 2 and (normalize or sum(weights) == 1):  # a zero sum is refused by check_params
        return torch.lerp(ctx.tensors[0], ctx.tensors[1], weights[1] / sum(weights))
    return merge_in_chunks(
        ctx.tensors, lambda chunks: _weighted_sum(chunks[0].mul_(weights[0]), chunks[1:], weights, normalize))


def check_params(model_params: list[dict[str, Any]], params: dict[str, Any], tensor_name: str) -> None:
    """Refuse normalising by weights that cancel out (RecipeError): the result would be a division by zero."""
    if params["normalize"] and abs(sum(p["weight"] for p in model_params)) < 1e-8:
        raise RecipeError(
            f"The weights add up to zero for {tensor_name}, so linear cannot normalise by them.",
            hint="Change the weights so that they do not cancel out, or set `normalize: false`.",
            key=("parameters", "normalize"),
        )


METHOD = MergeMethod.implementing(
    LINEAR,
    merge=merge,
    working_copies=WorkingCopies(1.0, 0.0),
    check_params=check_params,
    merge_stored=merge_stored,
    mergekit_float32=True,
    elementwise=True,
)
