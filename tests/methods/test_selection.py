"""Exact top-k selection (radix select on float bits) and the float64 reductions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from guiapp.engine.methods import _reduce, _selection
from guiapp.engine.methods._selection import kth_largest, top_k_mask


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


def test_kth_largest_on_a_large_random_tensor_matches_a_sort():
    values = torch.rand(300_000, generator=torch.Generator().manual_seed(2)) ** 3
    ordered = torch.sort(values, descending=True).values
    for k in (1, 7, 150_000, 299_999, 300_000):
        value, taken, tied = kth_largest(values, k)
        assert float(value) == float(ordered[k - 1])
        assert taken == int((ordered[:k] == value).sum()) and tied == int((values == value).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_k_on_large_tensors_with_many_ties(dtype):
    generator = torch.Generator().manual_seed(4)
    for levels, k in [(3, 100_000), (50, 12_345), (1000, 199_999), (1, 5)]:
        values = torch.randint(0, levels, (200_000,), generator=generator).to(dtype)
        expected = torch.zeros(200_000, dtype=torch.bool)
        expected[torch.sort(values, descending=True, stable=True).indices[:k]] = True
        assert torch.equal(top_k_mask(values, k), expected), (levels, k)


@pytest.mark.parametrize("wrong", ["too_low", "too_high"])
def test_a_bracket_that_misses_is_widened_and_the_answer_stays_exact(monkeypatch, wrong):
    values = torch.rand(100_000, generator=torch.Generator().manual_seed(5))
    k = 40_000
    ordered = torch.sort(values, descending=True).values
    if wrong == "too_low":  # the whole bracket lies below the k-th largest
        bracket = (ordered[60_000], ordered[70_000])
    else:
        bracket = (ordered[1_000], ordered[2_000])
    monkeypatch.setattr(_selection, "_bracket", lambda flat, k: bracket)
    value, taken, tied = kth_largest(values, k)
    assert float(value) == float(ordered[k - 1]) and taken == tied == 1


def test_kth_largest_refuses_bad_input():
    with pytest.raises(ValueError):
        kth_largest(torch.ones(3, dtype=torch.int32), 1)
    with pytest.raises(ValueError):
        kth_largest(torch.ones(3), 4)


def test_reductions_accumulate_in_float64():
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(3_000_000, generator=generator) + 0.25
    b = torch.randn(3_000_000, generator=generator)
    a64, b64 = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    assert _reduce.dot(a, b) == pytest.approx(float(np.dot(a64, b64)), rel=1e-12)
    assert _reduce.norm(a) == pytest.approx(math.sqrt(float(np.dot(a64, a64))), rel=1e-12)
    assert _reduce.sum_abs(a) == pytest.approx(float(np.abs(a64).sum()), rel=1e-12)
    assert _reduce.mean_square(b) == pytest.approx(float(np.mean(b64 * b64)), rel=1e-12)


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
    assert _reduce.dot(cube, other) == pytest.approx(float((cube * other).sum()), rel=1e-12)
    assert _reduce.dots(cube, [other, cube]) == pytest.approx(
        [float((cube * other).sum()), float((cube * cube).sum())], rel=1e-12
    )
    assert _reduce.sum_abs(cube) == pytest.approx(float(cube.abs().sum()), rel=1e-12)
    assert _reduce.norm(cube) == pytest.approx(float(cube.norm()), rel=1e-12)
