"""Passthrough: copy tensors unchanged (times an optional scale); with slices it stacks layers (frankenmerges)."""

from __future__ import annotations

from typing import Any

import torch

from guiapp.errors import IncompatibleModelsError
from guiapp.merging.method_declarations import PASSTHROUGH
from guiapp.merging.methods.base import MergeContext, MergeMethod, WorkingCopies


def merge(ctx: MergeContext) -> torch.Tensor:
    if len(ctx.tensors) != 1:
        raise IncompatibleModelsError(
            f"Passthrough copies one input per tensor, but {ctx.tensor_name} comes from {len(ctx.tensors)} "
            f"models ({', '.join(ctx.model_names)}).",
            hint="Give each slice a single source, or use a merging method such as linear.",
        )
    if _copies_input(ctx.model_params, ctx.params):
        return ctx.tensors[0]
    return ctx.tensors[0] * float(ctx.model_params[0]["scale"])


def _copies_input(model_params: list[dict[str, Any]], params: dict[str, Any]) -> bool:
    return float(model_params[0]["scale"]) == 1


def _check_inputs(n_non_base: int, has_base: bool) -> str | None:
    count = n_non_base + has_base
    if count <= 1:
        return None
    return (
        "Passthrough copies each tensor from a single model (use slices with one source each to stack layers, "
        f"or a method such as linear to combine models), but {count} models supply each tensor "
        "(a base_model not listed among the models counts as one more)"
    )


METHOD = MergeMethod.implementing(
    PASSTHROUGH,
    merge=merge,
    working_copies=WorkingCopies(1.0, 0.0),
    elementwise=True,
    check_inputs=_check_inputs,
    copies_input=_copies_input,
)
