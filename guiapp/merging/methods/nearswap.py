"""NearSwap: take the other model's value where it is close to the base's, keep the base where they differ."""

from __future__ import annotations

import torch

from guiapp.merging.method_declarations import NEARSWAP
from guiapp.merging.methods._input_rules import base_and_one_model
from guiapp.merging.methods._stored import merge_in_chunks
from guiapp.merging.methods.base import LoneTensorPolicy, MergeContext, MergeMethod, WorkingCopies

_DISTANCE_FLOOR = 1e-6


def nearswap(t: float, base: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """w·x + (1−w)·b with w = clamp(t / max(|b − x|, 1e-6), 0, 1): entries closer than t move fully to x."""
    return torch.lerp(base, other, _swap_weight(t, other - base))


def _swap_weight(t: float, difference: torch.Tensor) -> torch.Tensor:
    """NearSwap's w from x − b, computed in place in `difference`."""
    return difference.abs_().clamp_(min=_DISTANCE_FLOOR).reciprocal_().mul_(t).clamp_(0.0, 1.0)


def merge(ctx: MergeContext) -> torch.Tensor:
    (other,) = ctx.non_base()
    return nearswap(float(ctx.params["t"]), ctx.tensors[ctx.base_index], ctx.tensors[other])


def merge_stored(ctx: MergeContext) -> torch.Tensor:
    """`merge` of inputs as stored, a chunk at a time (`merge_in_chunks`), with the same operations: the same result
    bit for bit. Per million bf16 entries 2.7 against 3.5 ms (one thread); the merge step of a 1 GB merge 2.6–2.8
    against 3.1–3.6 s."""
    (other,) = ctx.non_base()
    t = float(ctx.params["t"])

    def merge_chunk(chunks: list[torch.Tensor]) -> torch.Tensor:
        base, swapped = chunks[ctx.base_index], chunks[other]
        weight = _swap_weight(t, torch.sub(swapped, base))
        return base.lerp_(swapped, weight)

    return merge_in_chunks(ctx.tensors, merge_chunk)


METHOD = MergeMethod.implementing(
    NEARSWAP,
    merge=merge,
    merge_stored=merge_stored,
    working_copies=WorkingCopies(0.0, 1.5),
    elementwise=True,
    lone_tensor=LoneTensorPolicy.COPY_IF_BASE,
    check_inputs=base_and_one_model("NearSwap"),
)
