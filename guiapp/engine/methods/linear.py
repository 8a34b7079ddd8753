"""Linear: the weighted average of the inputs (Wortsman et al. 2022, "Model soups")."""

from __future__ import annotations

import torch

from guiapp.engine.methods.base import BaseRole, MergeContext, MergeMethod, ParamKind, ParamSpec


def merge(ctx: MergeContext) -> torch.Tensor:
    weights = [float(p["weight"]) for p in ctx.model_params]
    result = sum(w * x for w, x in zip(weights, ctx.tensors))
    if ctx.params["normalize"]:
        # A zero sum is refused at validation time; this guards filters/gradients that reach zero on one tensor.
        total = sum(weights)
        if abs(total) < 1e-8:
            raise ValueError(f"the weights of {ctx.tensor_name} add up to zero, so they cannot be normalised")
        result = result / total
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
)
