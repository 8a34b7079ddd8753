"""Exact top-k selection (radix select on float bits) and the float64 reductions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from guiapp.engine.methods import _reduce
from guiapp.engine.methods._selection import kth_largest, top_k_mask


def reference_top_k(values: list[float], k: int) -> list[int]:
    """Indices of the k largest values, equal values ordered by lowest index first."""
    return sorted(sorted(range(len(values)), key=lambda i: (-values[i], i))[: max(k, 0)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_k_matches_the_reference_on_many_tied_cases(dtype):
    generator = torch.Generator().manual_seed(1)
    for _ in range(200):
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
        value, taken = kth_largest(values, k)
        assert float(value) == float(ordered[k - 1])
        assert taken == int((ordered[:k] == value).sum())


def test_kth_largest_refuses_bad_input():
    with pytest.raises(ValueError):
        kth_largest(torch.ones(3, dtype=torch.float16), 1)
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


def test_row_dots_work_on_rows_and_on_transposed_views():
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    b = torch.ones(3, 4)
    assert _reduce.row_dots(a, b).tolist() == [6.0, 22.0, 38.0]
    assert _reduce.row_dots(a.T, b.T).tolist() == [12.0, 15.0, 18.0, 21.0]
    assert _reduce.row_dots(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])).tolist() == [11.0]
