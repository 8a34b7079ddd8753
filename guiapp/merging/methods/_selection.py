"""Exact selection of the largest entries, with ties broken by lowest flat index.

Every rank-based choice (TIES' magnitude pruning, Breadcrumbs' window, SCE's variance top-k) goes through
`LargestK`, so they all order entries the same way: by value, and among equal values the lower flat index counts
as the larger. The scores may come a block at a time, so a tensor too large to hold whole can be ranked while it
streams past (torch.quantile refuses more than 2^24 entries; a sort or kthvalue holds them all and takes seconds).
One pass draws a random sample of the scores, whose order statistics very likely enclose the k-th largest; a
second pass counts the entries above that bracket and keeps the few inside it, among which the k-th largest is
found by sorting. The answer is exact whatever the sample: an unlucky one only costs another pass with a wider
bracket.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol, TypeVar

import torch

_SAMPLE_EVERY = 64  # entries per sampled entry, at least
_SAMPLE_MOST = 1 << 20  # about this many at most: the bracket is narrow enough, and the sample stays the same size
_SORT_BELOW = 1 << 16  # fewer scores than this are simply sorted: no sample, one pass
_SAMPLE_SEED = 0x5EED  # the sample affects speed only, so it need not vary with the job
_EXACT_FLOAT_SUM = 1 << 24
_CHUNK = 4096  # entries counted at a time where ties at the cut are split


class _Gathered:
    """Entries gathered over one pass, in one buffer that doubles when full. One allocation rather than one small
    piece per block: pieces that live through a pass sit between the blocks' short-lived buffers in the C
    allocator's heap, so what it held grew with the number of blocks (a 65 M-entry tensor's merge peaked 50-370 MB
    above the others')."""

    def __init__(self, capacity: int) -> None:
        self._capacity = max(1, capacity)
        self._buffer: torch.Tensor | None = None
        self._size = 0

    def slot(self, count: int, like: torch.Tensor) -> torch.Tensor:
        """The next `count` entries of the buffer (dtype and device of `like`), counted as gathered: fill them."""
        end = self._size + count
        if self._buffer is None:
            self._buffer = torch.empty(max(self._capacity, end), dtype=like.dtype, device=like.device)
        elif end > self._buffer.numel():
            grown = torch.empty(max(end, 2 * self._buffer.numel()), dtype=self._buffer.dtype, device=like.device)
            grown[: self._size] = self._buffer[: self._size]
            self._buffer = grown
        start, self._size = self._size, end
        return self._buffer[start:end]

    def values(self) -> torch.Tensor:
        """What was gathered, in order (empty before the first block)."""
        return self._buffer[: self._size] if self._buffer is not None else torch.empty(0, dtype=torch.float32)


class LargestK:
    """The k largest of `n` floating scores, seen a block at a time (NaN is never selected).

    Show every block, in order, to `count` once per pass, and call `end_pass` after each; `passes_left` says
    whether another pass is needed (usually two in all; a third after an unlucky sample). Then `indicator` marks
    the selected entries of each block, again called on the blocks in order (`rewind` to mark them again). k <= 0
    selects nothing, k >= n everything, without any pass; a caller that learns k while counting gives it to `settle`.
    """

    def __init__(self, n: int, k: int, dtype: torch.dtype) -> None:
        if not dtype.is_floating_point:
            raise ValueError(f"LargestK ranks floating scores, not {dtype}")
        self._n, self._k, self._dtype = n, k, dtype
        self._drawing_sample = n >= _SORT_BELOW  # the first pass draws the sample
        self._sample_every = max(_SAMPLE_EVERY, n // _SAMPLE_MOST)
        self._sample = _Gathered(n // self._sample_every + 64)
        self._sampled_blocks = 0
        self._sample_values: torch.Tensor | None = None  # the sample without NaN, in no order
        self._margin = 0
        self._bracket: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)
        self._above = 0  # entries above the bracket
        self._at_upper: list[int] = []  # entries equal to its upper bound, block by block
        self._inside = _Gathered(n if not self._drawing_sample else 0)  # the entries strictly inside it
        self._collect = True  # whether the entries inside are collected, or only counted (in `_between`)
        self._collect_upper = self._collect_lower = False  # whether the entries equal to a bound are collected too
        self._between = 0
        self._inside_sizes: list[int] = []  # how many entries each block added to those collected
        self._at_lower: list[int] = []  # entries equal to its lower bound (when below the upper one), block by block
        self._threshold: torch.Tensor | None = None
        self._below_threshold = -math.inf
        self._ties_left = 0  # entries equal to the threshold still to be selected, in flat order
        self._ties_found = 0  # as many, before the first block was marked
        self._all_ties = True
        self._ties_by_block: list[int] | None = None  # entries equal to the threshold in each block, when counted
        self._next_block = 0  # the block that `indicator` or `shrink` sees next
        self.passes_left = 0 if k <= 0 or k >= n else (2 if self._drawing_sample else 1)

    @property
    def samples_next_pass(self) -> bool:
        """Whether the next pass draws the sample (its blocks are shown through `sample_positions`)."""
        return self._drawing_sample and self.passes_left > 0

    def sample_positions(self, numel: int, block_numel: int | None = None) -> torch.Tensor | None:
        """While the first pass draws the sample: the flat positions, in the next `numel` scores, of those it
        samples; None in other passes. When those scores are a part of a block of `block_numel` (a caller that
        reads only some of each block's rows in this pass), as many are drawn from them as from the whole block, so
        the sample's size does not depend on how much is read. A caller whose scores are costly computes just these
        and shows them to `count_sample` instead of the block to `count`. Every selection over the same blocks
        draws the same ones."""
        if not self.samples_next_pass:
            return None
        generator = torch.Generator().manual_seed(_SAMPLE_SEED + self._sampled_blocks)
        count = min(numel, max(1, (block_numel or numel) // self._sample_every))
        # One random entry in each run of `every`: in increasing order, so the gather sweeps the block once instead of
        # jumping about it; a stratified sample, at least as good as a uniform one for ranks.
        every = numel // count
        return torch.randint(every, (count,), generator=generator).add_(torch.arange(0, count * every, every))

    def count_sample(self, sampled: torch.Tensor) -> None:
        """Look at the next block's scores at `sample_positions`, in the pass that draws the sample."""
        self._sample.slot(sampled.numel(), sampled).copy_(sampled.reshape(-1))
        self._sampled_blocks += 1

    def count(self, scores: torch.Tensor) -> None:
        """Look at one block's scores in the current pass."""
        flat = scores.reshape(-1)
        positions = self.sample_positions(flat.numel())
        if positions is not None:
            self.count_sample(flat[positions.to(flat.device)])
            return
        upper, lower = self._bracket
        # Entries equal to a bound are only counted, unless the sample holds that value rarely: a tensor whose
        # changes are mostly 0 (rows a fine-tune never touched) would otherwise put most of itself inside a bracket
        # that starts at 0. The counts are comparisons written as 0.0/1.0 into float32 and summed, several times
        # faster on CPU than bool masks; the entries collected are where the lower side's indicator (1.0 from where
        # the collected range starts) exceeds the upper side's (1.0 from where it ends).
        upper_side = torch.empty(flat.shape, dtype=torch.float32, device=flat.device)
        if upper is not None:
            above = count_ones(torch.gt(flat, upper, out=upper_side))
            self._above += above
            if not self._collect_upper:
                self._at_upper.append(count_ones(torch.ge(flat, upper, out=upper_side)) - above)
        if upper is not None and lower is not None and bool(upper == lower):
            # The sample's values all around the k-th largest's rank were one value (bfloat16 changes take few
            # distinct values): nothing lies strictly inside, and the count above tells whether it is the k-th.
            return
        lower_side = torch.empty(flat.shape, dtype=torch.float32, device=flat.device)
        if lower is not None:
            at_least = count_ones(torch.ge(flat, lower, out=lower_side))
            if not self._collect_lower:
                self._at_lower.append(at_least - count_ones(torch.gt(flat, lower, out=lower_side)))
        if not self._collect:  # both bounds, and no sampled value between them: count, do not collect
            self._between += (at_least - self._at_lower[-1]) - (above + self._at_upper[-1])
            return
        if upper is None and lower is None:
            inside = flat
        elif upper is None:
            inside = flat[lower_side.bool()]
        elif lower is None:
            inside = flat[(torch.le if self._collect_upper else torch.lt)(flat, upper)]
        else:
            inside = flat[lower_side.sub_(upper_side).bool()]
        self._inside_sizes.append(inside.numel())
        self._inside.slot(inside.numel(), inside).copy_(inside)

    def settle(self, k: int) -> None:
        """Change k before the pass that counts ends: for a caller that learns how many entries it selects while
        they are ranked (SCE keeps a fraction of the scores that are not 0). The bracket drawn for the k given before
        may miss the new one's rank, which costs another pass; the selection is exact for the k given last. Raises
        ValueError once no pass is left."""
        if not self.passes_left:
            raise ValueError("LargestK.settle after the k-th largest was found")
        self._k = k

    def end_pass(self) -> None:
        """Close the current pass: after the sample, draw the bracket; after the count, find the k-th largest or
        widen the bracket for another pass."""
        self.passes_left -= 1
        if not self._drawing_sample and (self._k <= 0 or self._k >= self._n):  # settled on none or all
            self.passes_left = 0
            self._release()
            return
        if self._drawing_sample:
            self._drawing_sample = False
            sample = self._sample.values()
            self._sample_values = sample[~torch.isnan(sample)].clone()
            self._sample = _Gathered(0)
            fraction = self._k / self._n
            # About 6 standard deviations of the sample rank of the k-th largest entry, plus a little for small k.
            self._margin = int(6 * math.sqrt(self._sample_values.numel() * fraction * (1 - fraction))) + 8
            self._bracket = self._draw_bracket()
            self._inside = _Gathered(self._expected_inside())
            return
        collected, sizes = self._inside.values(), self._inside_sizes
        self._inside_sizes = []
        inside = torch.sort(collected[~torch.isnan(collected)], descending=True).values
        upper, lower = self._bracket
        wanted = self._k - self._above  # the k-th largest's rank among the entries at or below the upper bound
        candidates = [(upper, self._at_upper), (None, None), (lower, self._at_lower)]
        between = inside.numel() if self._collect else self._between
        self._above, self._at_upper, self._at_lower, self._between = 0, [], [], 0
        for bound, by_block in candidates:  # noqa: B007 - the loop stops at the one that holds the k-th largest
            count = between if by_block is None else sum(by_block)
            if 1 <= wanted <= count:
                break
            wanted -= count
        else:
            if upper is None and lower is None:  # only NaN is left unranked; it is never selected
                self._found(inside[-1] if inside.numel() else torch.tensor(math.inf, dtype=self._dtype), 0, True)
                return
            self._margin *= 8  # the bracket missed: count again with a wider one
            self._bracket = self._draw_bracket()
            self._inside = _Gathered(self._expected_inside())
            self.passes_left = 1
            return
        if bound is not None:
            self._found(bound, wanted, wanted == count, by_block)
            return
        if not self._collect:  # the k-th largest lies between the two values after all: count again, collecting
            self._collect = True
            self._inside = _Gathered(self._expected_inside())
            self.passes_left = 1
            return
        threshold = inside[wanted - 1]
        ties_left = wanted - int(torch.count_nonzero(inside > threshold))
        equal = torch.eq(collected, threshold)
        ties_by_block = [int(part.sum()) for part in equal.split(sizes)]
        self._found(threshold, ties_left, ties_left == int(equal.sum()), ties_by_block)

    def _found(
        self, threshold: torch.Tensor, ties_left: int, all_ties: bool, ties_by_block: list[int] | None = None
    ) -> None:
        self._threshold, self._ties_left, self._all_ties = threshold.clone(), ties_left, all_ties
        self._ties_found = ties_left
        # |x| >= t is |x| > the dtype's next value below t: what `shrink` keeps where every tie is selected.
        self._below_threshold = float(torch.nextafter(threshold, threshold.new_tensor(-math.inf)))
        self._ties_by_block = ties_by_block
        self._release()

    def _release(self) -> None:
        """Drop the sample and the entries collected, no longer needed: a merge keeps every tensor's selections until
        it ends (a 7B model's samples add up to about 1 GB); the bracket's bounds are views that would keep them
        alive (the threshold is a copy)."""
        self._bracket, self._sample_values, self._inside = (None, None), None, _Gathered(0)

    def _expected_inside(self) -> int:
        # The bracket spans 2·margin sample entries, each standing for n / sample-size entries; twice that, so the
        # buffer seldom grows.
        size = self._sample_values.numel() if self._sample_values is not None else 0
        return self._n if size == 0 else min(self._n, 4 * self._margin * self._n // size)

    def _draw_bracket(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(upper, lower) sample values around the k-th largest's expected rank; None: no bound on that side."""
        if self._sample_values is None:
            return None, None
        size = self._sample_values.numel()
        position = int(self._k / self._n * size)
        high, low = position - self._margin, position + self._margin
        upper, lower = (self._largest(high) if high >= 0 else None, self._largest(low) if low < size else None)
        # bfloat16 changes take few distinct values: where the sample has none between the bounds, the entries
        # between them are most likely none or few, and the k-th largest one of the bounds; they are counted then,
        # and collected only in another pass if it is one of them after all.
        sample = self._sample_values
        self._collect = upper is None or lower is None or bool(torch.logical_and(sample > lower, sample < upper).any())
        # A bound the sample holds a few times at most has few entries: they are collected with those inside,
        # which saves counting them apart.
        rare = self._margin // 4
        self._collect_upper = self._collect and upper is not None and int(torch.eq(sample, upper).sum()) <= rare
        self._collect_lower = self._collect and lower is not None and int(torch.eq(sample, lower).sum()) <= rare
        return upper, lower

    def _largest(self, rank: int) -> torch.Tensor:
        """The sample's value at `rank` (0: its largest): a selection, not a sort of the whole sample."""
        return torch.kthvalue(self._sample_values, self._sample_values.numel() - rank).values

    @property
    def k(self) -> int:
        """How many entries are selected (all of them when k >= n, none when k <= 0)."""
        return min(max(self._k, 0), self._n)

    def rewind(self) -> None:
        """Start marking the blocks again from the first: for a caller that goes over the selected entries in more
        than one pass."""
        self._next_block, self._ties_left = 0, self._ties_found

    def indicator(self, scores: torch.Tensor) -> torch.Tensor:
        """1.0 at the block's selected entries and 0.0 elsewhere: float32, the block's shape."""
        if self._k <= 0 or self._k >= self._n:
            return torch.full(scores.shape, float(self._k > 0), dtype=torch.float32, device=scores.device)
        return self._indicator(scores, self._take_block())

    def shrink(self, values: torch.Tensor, scratch: torch.Tensor) -> None:
        """Zero, in place, the entries of the next block `values` whose magnitudes (the scores) are not selected:
        `indicator(values.abs())` multiplied in, in one pass when the block's selection is the scores above a value.
        `scratch` is a buffer of the block's shape and dtype that this may overwrite."""
        if self._k >= self._n:
            return
        if self._k <= 0:
            values.mul_(0)  # NaN stays NaN, as with the indicator
            return
        every_tie = self._take_block()
        if every_tie is None:
            values.mul_(self._indicator(torch.abs(values, out=scratch), every_tie))
            return
        # hardshrink keeps exactly the entries whose magnitude exceeds the bound (NaN stays NaN, as it does when
        # multiplied by 0).
        bound = self._below_threshold if every_tie else float(self._threshold)
        torch.ops.aten.hardshrink.out(values, bound, out=values)

    def _take_block(self) -> bool | None:
        """Move on to the next block and say which of its entries equal to the threshold are selected: True every
        one, False none, None some (the first ones, in flat order)."""
        if self.passes_left:
            raise ValueError("LargestK.indicator before the k-th largest was found")
        index, self._next_block = self._next_block, self._next_block + 1
        if self._all_ties or not self._ties_left:
            return self._all_ties
        if self._ties_by_block is not None and self._ties_by_block[index] <= self._ties_left:
            self._ties_left -= self._ties_by_block[index]  # counted in the last pass: this block's are all selected
            return True
        return None

    def _indicator(self, scores: torch.Tensor, every_tie: bool | None) -> torch.Tensor:
        selected = torch.empty(scores.shape, dtype=torch.float32, device=scores.device)
        if every_tie is not None:
            return (torch.ge if every_tie else torch.gt)(scores, self._threshold, out=selected)
        torch.gt(scores, self._threshold, out=selected)
        equal = torch.eq(scores.reshape(-1), self._threshold, out=torch.empty_like(selected.view(-1)))
        found = count_ones(equal)
        if found > self._ties_left:
            _keep_first_ones(equal, self._ties_left)
        selected.view(-1).add_(equal)
        self._ties_left -= min(found, self._ties_left)
        return selected


def _keep_first_ones(flat: torch.Tensor, count: int) -> None:
    """Zero, in place, every 1.0 of a flat float32 tensor of 0.0 and 1.0 after its first `count`.

    Counted a chunk at a time first, so the running count is taken over one chunk only: over a whole block it was
    the slowest step of a merge pass that splits ties."""
    head = flat[: flat.numel() - flat.numel() % _CHUNK].view(-1, _CHUNK)
    reached = head.sum(1, dtype=torch.float64).cumsum(0)  # ones up to the end of each chunk
    crossing = int(torch.searchsorted(reached, float(count)))  # the first chunk that reaches `count` (or the tail)
    start = crossing * _CHUNK
    before = int(reached[crossing - 1]) if crossing else 0
    piece = flat[start : start + _CHUNK]
    piece.mul_(piece.cumsum(0) <= count - before)  # a float32 sum of a chunk's ones is exact
    flat[start + _CHUNK :].zero_()


def count_ones(indicator: torch.Tensor) -> int:
    """How many entries of a float32 tensor of 0.0 and 1.0 are 1.0.

    Comparisons written into float32 and summed run several times faster on CPU than into bool and counted; a
    float32 sum of 0s and 1s is exact up to 2^24 entries, so longer tensors are summed in parts.
    """
    return sum(int(part.sum()) for part in indicator.reshape(-1).split(_EXACT_FLOAT_SUM))


def top_k_indicator(scores: torch.Tensor, k: int) -> torch.Tensor:
    """1.0 at the k largest scores and 0.0 elsewhere (float32, the shape of `scores`); among equal scores, lowest
    flat index first.

    `scores` must be floating (NaN is never selected). k <= 0 selects nothing, k >= numel everything.
    """
    return shown_whole(LargestK(scores.numel(), k, scores.dtype), scores).indicator(scores)


def order_in_rows(scores: torch.Tensor) -> torch.Tensor:
    """The positions of each row's entries of a 2-D tensor of non-negative scores, largest first, equal scores by
    lowest index first: torch.argsort(scores, dim=1, descending=True, stable=True).

    float32 scores on the CPU (rows shorter than 2^32) are sorted as 64-bit keys, the score's bits above the
    position's, by numpy's vectorised sort: the keys are unique, so any sort gives the stable order, and a row of
    4096 scores sorts 3-4 times faster than with torch's stable argsort on one thread (DELLA ranks every row of
    every model this way). Other dtypes and devices use torch's sort.
    """
    width = scores.shape[1]
    if scores.dtype != torch.float32 or scores.device.type != "cpu" or width >= 1 << 32:
        return torch.argsort(scores, dim=1, descending=True, stable=True)
    position_bits = max(1, (width - 1).bit_length())
    # A non-negative float32's bits, read as an int32, order as the float does (NaN above +inf, as in torch's sort);
    # the key is (largest int32 - bits, position), so the ascending sort is a descending one.
    keys = scores.view(torch.int32).to(torch.int64).bitwise_left_shift_(position_bits)
    largest_first = torch.arange(width).add_(0x7FFFFFFF << position_bits)
    torch.sub(largest_first, keys, out=keys)
    keys.numpy().sort(axis=1)
    return keys.bitwise_and_((1 << position_bits) - 1)


class Passes(Protocol):
    """Anything that learns from passes over one tensor's blocks: `LargestK`, and groups of them."""

    @property
    def passes_left(self) -> int: ...

    def count(self, scores: torch.Tensor) -> None: ...

    def end_pass(self) -> None: ...


Learner = TypeVar("Learner", bound=Passes)


def shown_whole(learner: Learner, scores: torch.Tensor) -> Learner:
    """`learner` after every pass it needs over `scores`, a whole tensor shown as one block."""
    while learner.passes_left:
        learner.count(scores)
        learner.end_pass()
    return learner


def passes_left(group: Iterable[Passes]) -> int:
    """The passes the group still needs: as many as its slowest member (0 for an empty group)."""
    return max((member.passes_left for member in group), default=0)


def end_pass(group: Iterable[Passes]) -> None:
    """Close the current pass for each member still counting."""
    for member in group:
        if member.passes_left:
            member.end_pass()
