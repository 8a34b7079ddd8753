"""Arcee Fusion: take the other model's changes only where they matter most (importance above a dynamic cut)."""

from __future__ import annotations

import torch

from guiapp.merging.method_declarations import ARCEE_FUSION
from guiapp.merging.methods._input_rules import base_and_one_model
from guiapp.merging.methods.base import LoneTensorPolicy, MergeContext, MergeMethod, WorkingCopies

_SOFTMAX_EPS = 1e-8
# Beyond this many entries the quartiles come from a sample of this size (drawn with replacement), as mergekit.
_QUANTILE_SAMPLE = 1_000_000
_IQR_FACTOR = 1.5


def importance(base: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """|x − b| times KL(softmax(x) + 1e-8 ‖ softmax(b) + 1e-8) of each row (last dim)."""
    p = torch.softmax(other, dim=-1).add_(_SOFTMAX_EPS)
    q = torch.softmax(base, dim=-1).add_(_SOFTMAX_EPS)
    divergence = (p * (p / q).log_()).sum(dim=-1, keepdim=True)
    del p, q
    return (other - base).abs_().mul_(divergence)


def threshold(scores: torch.Tensor, generator: torch.Generator) -> float:
    """median + 1.5·IQR of `scores`, quantiles read as sorted[floor(q·(n−1))] (sampled beyond 1 M entries)."""
    flat = scores.reshape(-1)
    if flat.numel() > _QUANTILE_SAMPLE:
        picks = torch.randint(flat.numel(), (_QUANTILE_SAMPLE,), generator=generator, device=flat.device)
        flat = flat[picks]
    ordered = torch.sort(flat).values
    last = ordered.numel() - 1
    q1, median, q3 = (float(ordered[int(q * last)]) for q in (0.25, 0.5, 0.75))
    return median + _IQR_FACTOR * (q3 - q1)


def merge(ctx: MergeContext) -> torch.Tensor:
    (other_index,) = ctx.non_base()
    base, other = ctx.tensors[ctx.base_index], ctx.tensors[other_index]
    scores = importance(base, other)
    return torch.where(scores >= threshold(scores, ctx.generator), other, base)


METHOD = MergeMethod.implementing(
    ARCEE_FUSION,
    merge=merge,
    working_copies=WorkingCopies(0.0, 2.0),
    lone_tensor=LoneTensorPolicy.COPY_ONLY_COPY,
    check_inputs=base_and_one_model("Arcee Fusion"),
)
