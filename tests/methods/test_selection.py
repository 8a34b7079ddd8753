"""Exact top-k selection (radix select on float bits) and the float64 reductions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from guiapp.merging.methods import _reduce, _selection
from guiapp.merging.methods._selection import LargestK, top_k_indicator


def top_k_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    indicator = top_k_indicator(scores, k)
    assert indicator.dtype == torch.float32 and set(indicator.unique().tolist()) <= {0.0, 1.0}
    return indicator.bool()


def reference_top_k(values: list[float], k: int) -> list[int]:
    """Indices of the k largest values, equal values ordered by lowest index first."""
    return sorted(sorted(range(len(values)), key=lambda i: (-values[i], i))[: max(k, 0)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_k_matches_the_reference_on_many_tied_cases(dtype):
    generator = torch.Generator().manual_seed(1)
    for _ in range(80):
        n = int(torch.randint(1, 40, (), generator=generator))
        scale = 10.0 ** int(torch.randint(-30, 30, (), generator=generator))
        values = torch.randint(0, 4, (n,), generator=generator).to(dtype) * scale
        k = int(torch.randint(-1, n + 2, (), generator=generator))
        mask = top_k_mask(values, k)
        expected = reference_top_k(values.tolist(), k)
        assert torch.nonzero(mask).flatten().tolist() == expected, (values.tolist(), k)


def test_ties_at_the_cut_keep_the_lowest_flat_indices():
    values = torch.tensor([[0.5, 2.0, 0.5], [0.5, 3.0, 0.5]])
    mask = top_k_mask(values, 4)
    assert mask.tolist() == [[True, True, True], [False, True, False]]
    assert mask.shape == values.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_k_on_large_tensors_with_many_ties(dtype):
    generator = torch.Generator().manual_seed(4)
    for levels, k in [(3, 100_000), (50, 12_345), (1000, 199_999), (1, 5)]:
        values = torch.randint(0, levels, (200_000,), generator=generator).to(dtype)
        expected = torch.zeros(200_000, dtype=torch.bool)
        expected[torch.sort(values, descending=True, stable=True).indices[:k]] = True
        assert torch.equal(top_k_mask(values, k), expected), (levels, k)


def _streamed_mask(values: torch.Tensor, k: int, block_sizes: list[int]) -> torch.Tensor:
    """LargestK over `values` shown in blocks of the given sizes (repeated until the end), masks concatenated."""
    blocks, start, sizes = [], 0, iter(block_sizes * values.numel())
    while start < values.numel():
        size = next(sizes)
        blocks.append(values[start : start + size])
        start += size
    largest = LargestK(values.numel(), k, values.dtype)
    while largest.passes_left:
        for block in blocks:
            largest.count(block)
        largest.end_pass()
    return torch.cat([largest.indicator(block).bool() for block in blocks])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_blocks_select_exactly_what_a_stable_sort_selects(dtype):
    generator = torch.Generator().manual_seed(7)
    for levels, k, blocks in [(4, 30_000, [777, 5]), (1_000_000, 12_345, [10_000]), (2, 1, [3, 4_999]),
                              (7, 49_999, [1]), (100, 25_000, [50_000])]:
        if levels < 1_000_000:
            values = torch.randint(0, levels, (50_000,), generator=generator).to(dtype) * 1e-3
        else:
            values = torch.rand(50_000, generator=generator).to(dtype) ** 4
        if levels == 7:
            values = values[:1_000]
            k = 600
        expected = torch.zeros(values.numel(), dtype=torch.bool)
        expected[torch.sort(values.double(), descending=True, stable=True).indices[:k]] = True
        assert torch.equal(_streamed_mask(values, k, blocks), expected), (dtype, levels, k, blocks)
        assert torch.equal(top_k_mask(values, k), expected)


def _passes(values: torch.Tensor, k: int) -> int:
    largest, passes = LargestK(values.numel(), k, values.dtype), 0
    while largest.passes_left:
        largest.count(values)
        largest.end_pass()
        passes += 1
    return passes


def test_a_sample_and_a_count_are_two_passes_and_small_tensors_need_one():
    values = torch.rand(1_000_000, generator=torch.Generator().manual_seed(8))
    assert [_passes(values, k) for k in (1, 500_000, 999_999)] == [2, 2, 2]
    assert _passes(values[:1000], 300) == 1
    assert _passes(values, 0) == _passes(values, 1_000_000) == 0


@pytest.mark.parametrize(("settled", "passes"), [(499_000, 2), (200_000, 3), (0, 2), (1_000_000, 2), (1_000_001, 2)])
@pytest.mark.parametrize("n", [1_000_000, 50_000])
def test_a_k_settled_while_counting_selects_exactly_that_many(settled, passes, n):
    values = torch.randint(0, 5_000, (n,), generator=torch.Generator().manual_seed(9)).float()  # ties at the cut
    settled = settled * n // 1_000_000
    largest, passes_made = LargestK(n, n // 2, torch.float32), 0  # ranked for an estimate of half
    blocks = values.split(30_000)
    while largest.passes_left:
        sampling = largest.samples_next_pass
        for block in blocks:
            largest.count(block)
        if not sampling:
            largest.settle(settled)
        largest.end_pass()
        passes_made += 1
    expected = torch.zeros(n, dtype=torch.bool)
    expected[torch.sort(values, descending=True, stable=True).indices[:settled]] = True
    assert torch.equal(torch.cat([largest.indicator(block).bool() for block in blocks]), expected)
    assert largest.k == min(settled, n)
    # The bracket drawn for the estimate holds a k close to it; one far from it costs another pass. A tensor too
    # small to sample is counted once.
    assert passes_made == (passes if n >= 65_536 else 1)
    with pytest.raises(ValueError):
        largest.settle(1)


@pytest.mark.parametrize("wrong", ["too_low", "too_high"])
def test_a_bracket_that_misses_costs_one_more_pass_and_the_answer_stays_exact(monkeypatch, wrong):
    values = torch.rand(200_000, generator=torch.Generator().manual_seed(5))
    k = 80_000
    ordered = torch.sort(values, descending=True).values
    # The whole bracket lies below the k-th largest, or above it.
    missed = (ordered[120_000], ordered[140_000]) if wrong == "too_low" else (ordered[1_000], ordered[2_000])
    drawn = []
    real = LargestK._draw_bracket

    def unlucky_first(self):
        drawn.append(1)
        return missed if len(drawn) == 1 else real(self)

    monkeypatch.setattr(LargestK, "_draw_bracket", unlucky_first)
    expected = torch.zeros(200_000, dtype=torch.bool)
    expected[torch.sort(values, descending=True, stable=True).indices[:k]] = True
    assert _passes(values, k) == 3
    assert torch.equal(_streamed_mask(values, k, [30_000]), expected)


@pytest.mark.parametrize("population", ["above", "below"])
def test_a_sample_of_one_value_that_is_not_the_cut_costs_passes_not_exactness(population):
    """A sample that is one value all around the cut makes a bracket of that single value, whose entries are
    counted and nothing collected; here every sampled entry is 1.0 while the k-th largest of the rest is not."""
    n, k = 400_000, 100_000
    positions = LargestK(n, k, torch.float32).sample_positions(n)  # the entries the first pass will look at
    generator = torch.Generator().manual_seed(3)
    others = 2.0 + torch.rand(n, generator=generator) if population == "above" else torch.rand(n, generator=generator)
    values = others.clone()
    values[positions] = 1.0
    expected = torch.zeros(n, dtype=torch.bool)
    expected[torch.sort(values, descending=True, stable=True).indices[:k]] = True
    assert _passes(values, k) > 2
    assert torch.equal(_streamed_mask(values, k, [n]), expected)


@pytest.mark.parametrize("levels", [3, 150_000])
def test_shrink_zeroes_exactly_the_entries_the_indicator_leaves_out(levels):
    """`shrink` prunes signed values by their magnitudes in one pass where it can; ties at the cut split across
    blocks, and NaN, must come out as the indicator makes them: ties of a value held many times (counted at a
    bound) or a few times (collected with the entries inside the bracket)."""
    generator = torch.Generator().manual_seed(4)
    values = torch.randint(0, levels, (400_000,), generator=generator).float() / levels
    values *= torch.where(torch.rand(400_000, generator=generator) < 0.5, -1.0, 1.0)
    values[7] = math.nan
    blocks = list(values.split(50_000))
    for k in (0, 20_000, 133_000, 266_000, 300_000, 399_999, 400_000):
        expected = values * _streamed_mask(values.abs(), k, [50_000])
        largest = LargestK(values.numel(), k, values.dtype)
        while largest.passes_left:
            for block in blocks:
                largest.count(block.abs())
            largest.end_pass()
        shrunk = [block.clone() for block in blocks]
        for block in shrunk:
            largest.shrink(block, torch.empty_like(block))
        torch.testing.assert_close(torch.cat(shrunk), expected, rtol=0, atol=0, equal_nan=True, msg=str(k))


def _collected_while_counting(values: torch.Tensor, k: int, blocks: int) -> tuple[torch.Tensor, int, int]:
    """(the selection's mask, passes, the most entries collected at once) of LargestK over `values` in blocks."""
    largest, blocks, passes, collected = LargestK(values.numel(), k, values.dtype), values.chunk(blocks), 0, 0
    while largest.passes_left:
        for block in blocks:
            largest.count(block)
            collected = max(collected, largest._inside.values().numel())
        largest.end_pass()
        passes += 1
    return torch.cat([largest.indicator(block).bool() for block in blocks]), passes, collected


@pytest.mark.parametrize("k", [199_000, 200_000, 201_000])
def test_a_cut_between_two_values_is_counted_and_nothing_collected(k):
    """bfloat16 changes near the cut often take two values, each many times: the entries are counted against
    both, and none is collected and sorted."""
    values = torch.where(torch.rand(400_000, generator=torch.Generator().manual_seed(6)) < 0.5, 2.0, 1.0)
    expected = torch.zeros(400_000, dtype=torch.bool)
    expected[torch.sort(values, descending=True, stable=True).indices[:k]] = True
    mask, passes, collected = _collected_while_counting(values, k, blocks=8)
    assert torch.equal(mask, expected) and passes == 2 and collected == 0


def test_a_value_between_the_two_that_the_sample_missed_costs_a_pass_not_exactness():
    n, k = 400_000, 200_000
    positions = LargestK(n, k, torch.float32).sample_positions(n)
    draws = torch.rand(n, generator=torch.Generator().manual_seed(7))
    values = torch.where(draws < 0.4, 2.0, torch.where(draws < 0.6, 1.5, 1.0))  # the k-th largest is 1.5 ...
    values[positions] = torch.where(torch.arange(positions.numel()) % 2 == 0, 2.0, 1.0)  # ... which none sampled is
    expected = torch.zeros(n, dtype=torch.bool)
    expected[torch.sort(values, descending=True, stable=True).indices[:k]] = True
    mask, passes, collected = _collected_while_counting(values, k, blocks=1)  # the positions drawn above
    assert torch.equal(mask, expected) and passes == 3 and collected > 0


def _held_bytes(largest: LargestK) -> int:
    """The bytes of the tensors a selection still references (a view keeps its whole storage alive)."""
    storages = {}
    for value in vars(largest).values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, torch.Tensor):
                storage = item.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


@pytest.mark.parametrize("miss", [False, True])
def test_once_the_cut_is_found_a_selection_holds_none_of_the_scores(monkeypatch, miss):
    # A merge keeps every tensor's selections until it ends; each held its sorted sample (1/64 of the scores),
    # which summed over a 7B model's tensors to about 0.9 GB.
    values = torch.rand(1_000_000, generator=torch.Generator().manual_seed(9))
    if miss:
        real, drawn = LargestK._draw_bracket, []

        def unlucky_first(self):
            drawn.append(1)
            return (self._sample_values.max(), self._sample_values.max()) if len(drawn) == 1 else real(self)

        monkeypatch.setattr(LargestK, "_draw_bracket", unlucky_first)
    largest = LargestK(values.numel(), 300_000, values.dtype)
    largest.count(values)
    largest.end_pass()
    assert _held_bytes(largest) >= values.numel() // 64 * 4 * 0.9  # the sample, until the cut is found
    while largest.passes_left:
        largest.count(values)
        largest.end_pass()
    assert _held_bytes(largest) <= 64  # a few numbers
    assert int(largest.indicator(values).sum()) == 300_000


@pytest.mark.parametrize("kind", ["mostly_zero", "three_levels"])
def test_entries_equal_to_a_bound_are_counted_not_collected(kind):
    """Ties at the cut, as real checkpoints make them: a fine-tune that left 90 % of a tensor alone (|δ| exactly 0),
    or bfloat16 weights whose changes take a few values. The answer is exact, and a bracket whose bounds sit on
    those values (or are the same value) keeps neither the ties nor what lies below them in memory."""
    generator = torch.Generator().manual_seed(9)
    if kind == "mostly_zero":
        values = torch.rand(400_000, generator=generator) * (torch.rand(400_000, generator=generator) < 0.1)
    else:
        values = torch.randint(0, 3, (400_000,), generator=generator).float() / 10
    collected = []
    real_count = LargestK.count

    def count_and_measure(self, scores):
        real_count(self, scores)
        collected.append(self._inside.values().numel())

    for k in (20_000, 40_000, 45_000, 200_000, 300_000):
        expected = torch.zeros(400_000, dtype=torch.bool)
        expected[torch.sort(values, descending=True, stable=True).indices[:k]] = True
        collected.clear()
        LargestK.count = count_and_measure
        try:
            mask = _streamed_mask(values, k, [50_000])
        finally:
            LargestK.count = real_count
        assert torch.equal(mask, expected), k
        assert max(collected) < 40_000, (k, max(collected))  # the nonzero tenth at most, never the zeros


def test_nan_is_never_selected_and_the_passes_end():
    values = torch.tensor([float("nan")] * 70_000 + [1.0] * 30_000)
    mask = top_k_mask(values, 50_000)
    assert int(mask.sum()) == 30_000 and not bool(mask[:70_000].any())


def test_largest_k_refuses_integers_and_an_early_mask():
    with pytest.raises(ValueError):
        LargestK(3, 1, torch.int32)
    with pytest.raises(ValueError):
        LargestK(3, 1, torch.float32).indicator(torch.ones(3))


def test_reductions_accumulate_in_float64():
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(3_000_000, generator=generator) + 0.25
    b = torch.randn(3_000_000, generator=generator)
    a64, b64 = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    assert _reduce.dots(a, [b])[0] == pytest.approx(float(np.dot(a64, b64)), rel=1e-12)
    assert _reduce.norm(a) == pytest.approx(math.sqrt(float(np.dot(a64, a64))), rel=1e-12)
    assert _reduce.sum_abs(a) == pytest.approx(float(np.abs(a64).sum()), rel=1e-12)
    assert _reduce.mean_square(b) == pytest.approx(float(np.mean(b64 * b64)), rel=1e-12)


def test_a_square_sum_shown_in_pieces_is_the_sum_of_the_whole_tensor():
    tensor = torch.randn(3_000_001, generator=torch.Generator().manual_seed(4)).mul_(1e3)
    whole = _reduce.square_sum(tensor)
    for cuts in ([1, 1_048_575, 1_048_577, 2_000_000], [999_983 * k for k in range(1, 4)], [5]):
        squares = _reduce.SquareSum(tensor.numel())
        for piece in torch.tensor_split(tensor, cuts):
            squares.add(piece.clone())
        assert squares.total() == whole, cuts  # the same float64 sum, bit for bit
    assert _reduce.SquareSum(0).total() == 0.0


def test_vector_gram_along_rows_and_columns():
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    b = torch.ones(3, 4)
    squares_a, squares_b, crossed = _reduce.vector_gram(a, b)
    assert crossed.tolist() == [6.0, 22.0, 38.0] and squares_b.tolist() == [4.0, 4.0, 4.0]
    assert squares_a.tolist() == [14.0, 126.0, 366.0]
    assert _reduce.vector_gram(a, b, dim=0)[2].tolist() == [12.0, 15.0, 18.0, 21.0]
    assert _reduce.vector_gram(a.T, b.T)[2].tolist() == [12.0, 15.0, 18.0, 21.0]
    vector = _reduce.vector_gram(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), dim=0)[2]
    assert vector.shape == () and float(vector) == 11.0


@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_chunking_does_not_change_the_results(monkeypatch, chunk):
    monkeypatch.setattr(_reduce, "_CHUNK", chunk)
    generator = torch.Generator().manual_seed(6)
    cube = torch.randn(2, 3, 4, generator=generator, dtype=torch.float64)
    other = torch.randn(2, 3, 4, generator=generator, dtype=torch.float64)
    for dim, axis in ((-1, -1), (0, 0)):
        squares, _, crossed = _reduce.vector_gram(cube, other, dim)
        assert squares.numpy() == pytest.approx((cube * cube).sum(axis).numpy(), rel=1e-12)
        assert crossed.numpy() == pytest.approx((cube * other).sum(axis).numpy(), rel=1e-12)
    flat_squares, _, flat_crossed = _reduce.vector_gram(cube.reshape(1, -1), other.reshape(1, -1))
    assert float(flat_crossed[0]) == pytest.approx(float((cube * other).sum()), rel=1e-12)
    assert _reduce.gram(cube, other) == pytest.approx(
        (float((cube * cube).sum()), float((other * other).sum()), float((cube * other).sum())), rel=1e-12
    )
    assert _reduce.dots(cube, [other])[0] == pytest.approx(float((cube * other).sum()), rel=1e-12)
    assert _reduce.dots(cube, [other, cube]) == pytest.approx(
        [float((cube * other).sum()), float((cube * cube).sum())], rel=1e-12
    )
    assert _reduce.sum_abs(cube) == pytest.approx(float(cube.abs().sum()), rel=1e-12)
    assert _reduce.norm(cube) == pytest.approx(float(cube.norm()), rel=1e-12)


def test_count_ones_is_exact_past_what_a_float32_sum_holds():
    ones = torch.ones((1 << 24) + 3)  # a float32 sum of these reads 2^24: 2^24 + 1 is not a float32
    assert _selection.count_ones(ones) == (1 << 24) + 3


def test_a_sample_of_the_scores_at_the_positions_asked_for_selects_as_the_whole_blocks_do():
    generator = torch.Generator().manual_seed(11)
    values = torch.randint(0, 300, (400_000,), generator=generator).to(torch.float32)
    blocks = values.split(65_536)
    whole, sampled, other = (LargestK(values.numel(), 123_456, values.dtype) for _ in range(3))
    for block in blocks:
        whole.count(block)
        positions = sampled.sample_positions(block.numel())
        assert torch.equal(positions, other.sample_positions(block.numel()))  # every selection over these blocks
        assert positions.numel() == block.numel() // 64
        sampled.count_sample(block[positions])
        other.count_sample(block[positions])
    assert sampled.sample_positions(10) is not None  # still drawing until the pass ends
    for selection in (whole, sampled):
        selection.end_pass()
        assert selection.sample_positions(65_536) is None
        while selection.passes_left:
            for block in blocks:
                selection.count(block)
            selection.end_pass()
    assert torch.equal(torch.cat([whole.indicator(b) for b in blocks]), torch.cat([sampled.indicator(b) for b in blocks]))


def test_the_sample_stays_about_a_million_scores_however_long_the_tensor():
    # A merge keeps a selection per model and tensor until the cut is found; its sample must not grow with the
    # tensor, or the peak memory does (a 7B model's embedding has 131 M entries).
    for n in (1 << 22, 1 << 28):
        selection = LargestK(n, n // 2, torch.float32)
        drawn = sum(selection.sample_positions(1 << 20).numel() for _ in range(n >> 20))
        assert drawn == min(n // 64, 1 << 20)


def test_a_sample_drawn_from_part_of_each_block_is_as_large_as_one_drawn_from_the_whole_block():
    n = 1 << 22
    whole, part = LargestK(n, n // 3, torch.float32), LargestK(n, n // 3, torch.float32)
    for _ in range(n >> 20):
        positions = part.sample_positions(1 << 17, block_numel=1 << 20)  # an eighth of the block read
        assert positions.numel() == whole.sample_positions(1 << 20).numel() == (1 << 20) // 64
        assert int(positions.max()) < 1 << 17 and bool((positions.diff() > 0).all())
        part.count_sample(torch.rand(positions.numel()))
    part.end_pass()
    assert not part.samples_next_pass and part.sample_positions(1 << 17, block_numel=1 << 20) is None


@pytest.mark.parametrize("n", [1, 4095, 4096, 4097, 1 << 20])
def test_keeping_the_first_ones_matches_a_running_count(n):
    generator = torch.Generator().manual_seed(n)
    for density in (0.001, 0.3, 1.0):
        flat = (torch.rand(n, generator=generator) < density).float()
        total = int(flat.sum())
        for count in sorted({1, total // 2, total - 1, total} - {0} if total else set()):
            expected = flat * (flat.cumsum(0, dtype=torch.float64) <= count)
            kept = flat.clone()
            _selection._keep_first_ones(kept, count)
            assert torch.equal(kept, expected), (density, count)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (4, 1), (1, 2), (0, 5), (3, 0), (37, 5), (9, 4099)])
def test_order_in_rows_is_the_stable_descending_argsort(dtype, shape):
    generator = torch.Generator().manual_seed(sum(shape))
    # Few distinct values, so most rows hold long runs of equal scores; zeros, +inf and NaN among them.
    scores = torch.randint(0, 6, shape, generator=generator).to(dtype).mul_(0.37)
    if shape[0] and shape[1] > 3:
        scores[0, :3] = torch.tensor([math.inf, math.nan, math.nan])
    expected = [sorted(range(len(row)), key=lambda i, row=row: (-(math.inf if math.isnan(row[i]) else row[i]),
                                                                 math.isnan(row[i]) is False, i))
                for row in scores.tolist()]
    order = _selection.order_in_rows(scores)
    assert order.dtype == torch.int64 and order.shape == scores.shape
    assert order.tolist() == expected
