"""Build a MergeContext the way the merge loop does: every declared parameter present, defaults filled in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from guiapp.merging.method_schema import BaseRole
from guiapp.merging.methods import get_method
from guiapp.merging.methods.base import MergeContext


def context(
    method_name: str,
    tensors: Sequence[Any],
    *,
    base_index: int | None = None,
    model_params: Sequence[dict[str, Any]] | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    **params: Any,
) -> MergeContext:
    """A context for `method_name` over `tensors` (lists or tensors; converted to `dtype`)."""
    method = get_method(method_name)
    if method.base_role is BaseRole.INPUT:
        assert base_index is None, "INPUT methods get no base index from the loop"
    given = list(model_params) if model_params is not None else [{} for _ in tensors]
    resolved_models = [
        {spec.name: entry.get(spec.name, spec.default) for spec in method.per_model_params} for entry in given
    ]
    resolved = {spec.name: params.get(spec.name, spec.default) for spec in method.global_params}
    return MergeContext(
        tensor_name="model.layers.0.mlp.up_proj.weight",
        tensors=[torch.as_tensor(t, dtype=dtype).clone() for t in tensors],
        base_index=base_index,
        model_params=resolved_models,
        params=resolved,
        model_names=[f"model-{i}" for i in range(len(tensors))],
        generator=torch.Generator().manual_seed(seed),
    )


def run(method_name: str, tensors: Sequence[Any], **kwargs: Any) -> torch.Tensor:
    """Merge `tensors` with `method_name` and return the result (inputs are checked to be left untouched)."""
    ctx = context(method_name, tensors, **kwargs)
    before = [t.clone() for t in ctx.tensors]
    result = get_method(method_name).merge(ctx)
    for original, after in zip(before, ctx.tensors):
        assert torch.equal(original, after), "a merge method modified one of its inputs"
    return result


def run_with_stats(method_name: str, tensors: Sequence[Any], **kwargs: Any) -> tuple[torch.Tensor, dict]:
    ctx = context(method_name, tensors, **kwargs)
    return get_method(method_name).merge(ctx), ctx.stats


def assert_stored_merge_is_the_float32_merge(method_name: str, tensors: Sequence[Any], dtype: torch.dtype,
                                             **kwargs: Any) -> None:
    """`method_name`'s `merge_stored` of `tensors` stored as `dtype` leaves them as they were and gives its float32
    `merge` of the same stored values rounded into `dtype`, bit for bit."""
    method = get_method(method_name)
    stored = context(method_name, tensors, dtype=dtype, **kwargs)
    before = [t.clone() for t in stored.tensors]
    merged = method.merge_stored(stored)
    assert all(torch.equal(a, b) for a, b in zip(before, stored.tensors))  # inputs left as they were
    converted = context(method_name, [torch.as_tensor(t).to(dtype) for t in tensors], **kwargs)
    assert merged.dtype == dtype and torch.equal(merged, method.merge(converted).to(dtype))
