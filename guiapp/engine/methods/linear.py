"""Linear: the weighted average of the inputs (Wortsman et al. 2022, "Model soups")."""

from __future__ import annotations

import torch

from guiapp.engine.methods.base import BaseRole, MergeContext, MergeMethod, ParamKind, ParamSpec


def merge(ctx: MergeContext) -> torch.Tensor:
    weights = [float(p["weight"]) for p in ctx.model_params]
    result = ctx.tensors[0] * weights[0]
    for weight, tensor in zip(weights[1:], ctx.tensors[1:]):
        result.add_(tensor, alpha=weight)
    if ctx.params["normalize"]:
        result.div_(sum(weights))  # a zero sum is refused by the plan, tensor by tensor
    return result


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
    elementwise=True,
)
