"""Exact selection of the largest entries, with ties broken by lowest flat index.

Every rank-based choice (TIES' magnitude pruning, Breadcrumbs' window, SCE's variance top-k) goes through
`top_k_mask`, so they all order entries the same way: by value, and among equal values the lower flat index
counts as the larger. `torch.quantile` refuses more than 2^24 entries and `torch.kthvalue`/`topk` take seconds
on a 58 M-entry weight, so large tensors use a sample to bracket the k-th largest value, count exactly how many
entries lie above the bracket, and select among the few entries inside it the same way (sorting once they are
few). The answer is exact whatever the sample; an unlucky sample only costs another pass with a wider bracket.
"""

from __future__ import annotations

import math

import torch

_SORT_BELOW = 1 << 16  # smaller tensors are simply sorted
_SAMPLE = 1 << 16
_SAMPLE_SEED = 0x5EED  # a fixed seed: the sample affects speed only, so it need not vary with the job


def kth_largest(values: torch.Tensor, k: int) -> tuple[torch.Tensor, int, int]:
    """Return the k-th largest entry of `values`, how many entries equal to it fall within the top k, and how
    many entries equal it in all.

    `values` must be a floating tensor without NaN and 1 <= k <= numel; otherwise ValueError (a programming
    error, never a user's).
    """
    if not values.dtype.is_floating_point:
        raise ValueError(f"kth_largest needs floating values, not {values.dtype}")
    flat = values.reshape(-1)
    n = flat.numel()
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is outside 1..{n}")
    if n < _SORT_BELOW:
        return _kth_in(flat, k)
    upper, lower = _bracket(flat, k)
    outside = torch.empty_like(flat, dtype=torch.bool)
    inside = torch.empty_like(flat, dtype=torch.bool)
    while True:
        above = int(torch.count_nonzero(torch.gt(flat, upper, out=outside))) if upper is not None else 0
        at_least = int(torch.count_nonzero(torch.ge(flat, lower, out=inside))) if lower is not None else n
        if above >= k:
            upper = None  # the sample put the bracket too low: open it upwards
        elif at_least < k:
            lower = None  # too high: open it downwards
        else:
            break
    if upper is not None and lower is not None and bool(upper == lower):
        return upper, k - above, at_least - above  # the bracket is a single value: all ties
    if at_least - above == n:
        return _kth_in(flat, k)  # the bracket excluded nothing: no progress to make by recursing
    if lower is None:
        inside.fill_(True)
    if upper is not None:
        inside.logical_and_(torch.le(flat, upper, out=outside))
    del outside
    # Every entry equal to the answer lies inside the bracket, so the counts of the subproblem are final.
    return kth_largest(flat[inside], k - above)


def _kth_in(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, int, int]:
    value = torch.sort(flat, descending=True).values[k - 1]
    greater = int(torch.count_nonzero(flat > value))
    return value, k - greater, int(torch.count_nonzero(flat == value))


def _bracket(flat: torch.Tensor, k: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Values from a sample that very likely enclose the k-th largest entry (None: no bound on that side)."""
    n = flat.numel()
    generator = torch.Generator(device=flat.device).manual_seed(_SAMPLE_SEED)
    picks = torch.randint(n, (_SAMPLE,), generator=generator, device=flat.device)
    ordered = torch.sort(flat[picks], descending=True).values
    fraction = k / n
    # About 6 standard deviations of the sample rank of the k-th largest entry, plus a little for small k.
    margin = int(6 * math.sqrt(_SAMPLE * fraction * (1 - fraction))) + 8
    position = int(fraction * _SAMPLE)
    high, low = position - margin, position + margin
    upper = ordered[high] if high >= 0 else None
    lower = ordered[low] if low < _SAMPLE else None
    return upper, lower


def top_k_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """A boolean mask (shape of `scores`) of the k largest scores; among equal scores, lowest flat index first.

    `scores` must be floating without NaN. k <= 0 selects nothing, k >= numel everything.
    """
    n = scores.numel()
    if k <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    if k >= n:
        return torch.ones_like(scores, dtype=torch.bool)
    flat = scores.reshape(-1)
    threshold, taken, tied = kth_largest(flat, k)
    if taken == tied:
        return (flat >= threshold).view(scores.shape)
    mask = flat > threshold
    mask[torch.nonzero(flat == threshold).squeeze(1)[:taken]] = True
    return mask.view(scores.shape)
