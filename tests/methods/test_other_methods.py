"""model_stock, sce, ram, ramplus_tl, nearswap, arcee_fusion and passthrough by hand and against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from guiapp.errors import IncompatibleModelsError
from tests.methods.helpers import assert_stored_merge_is_the_float32_merge, run

# ---- model_stock ----------------------------------------------------------------------------------------


def test_model_stock_by_hand():
    # Task vectors (1, 0) and (1, 1): cos = 1/√2, t = 2·cos / (1 + cos).
    cos = math.sqrt(0.5)
    t = 2 * cos / (1 + cos)
    result = run("model_stock", [[1.0, 1.0], [2.0, 1.0], [2.0, 2.0]], base_index=0, dtype=torch.float64)
    assert result.tolist() == pytest.approx([t * 2 + (1 - t), t * 1.5 + (1 - t)], rel=1e-12)


def test_model_stock_opposite_task_vectors_give_the_base():
    # cos = −1 with N = 2: 1 + (N − 1)·cos = 0, so t = 0.
    assert run("model_stock", [[1.0, 1.0], [2.0, 1.0], [0.0, 1.0]], base_index=0).tolist() == [1.0, 1.0]


def test_model_stock_filter_wise_uses_one_t_per_row():
    base = [[0.0, 0.0], [0.0, 0.0]]
    x1, x2 = [[1.0, 0.0], [1.0, 0.0]], [[1.0, 1.0], [0.0, 1.0]]
    cos = math.sqrt(0.5)
    t0 = 2 * cos / (1 + cos)
    rows = run("model_stock", [base, x1, x2], base_index=0, filter_wise=True, dtype=torch.float64)
    assert rows.tolist() == [pytest.approx([t0, t0 * 0.5], rel=1e-12), [0.0, 0.0]]  # row 1 is orthogonal: t = 0
    whole = run("model_stock", [base, x1, x2], base_index=0, dtype=torch.float64)
    cos_all = 1 / math.sqrt(6)  # flattened: (1, 0, 1, 0)·(1, 1, 0, 1) = 1, norms √2 and √3
    t_all = 2 * cos_all / (1 + cos_all)
    assert whole.tolist() == [pytest.approx([t_all, t_all * 0.5]), pytest.approx([t_all * 0.5, t_all * 0.5])]


def test_model_stock_three_models_match_numpy():
    generator = torch.Generator().manual_seed(6)
    xs = [torch.randn(4, 3, generator=generator).double() for _ in range(4)]
    b = xs[0].numpy().ravel()
    deltas = [x.numpy().ravel() - b for x in xs[1:]]
    cosines = [
        np.dot(deltas[i], deltas[j]) / (np.linalg.norm(deltas[i]) * np.linalg.norm(deltas[j]))
        for i in range(3) for j in range(i + 1, 3)
    ]  # fmt: skip
    cos = float(np.mean(cosines))
    t = 3 * cos / (1 + 2 * cos)
    expected = t * np.mean([x.numpy().ravel() for x in xs[1:]], axis=0) + (1 - t) * b
    result = run("model_stock", xs, base_index=0, dtype=torch.float64)
    assert result.numpy().ravel() == pytest.approx(expected, rel=1e-10)


# ---- sce ------------------------------------------------------------------------------------------------

SCE_BASE = [0.0, 0.0, 0.0, 0.0]
SCE_X1 = [1.0, -2.0, 0.0, 3.0]
SCE_X2 = [3.0, 1.0, 0.0, -1.0]


def sce(select_topk: float, tensors=(SCE_BASE, SCE_X1, SCE_X2)) -> list[float]:
    return run("sce", list(tensors), base_index=0, select_topk=select_topk, dtype=torch.float64).tolist()


def test_sce_without_selection_by_hand():
    # Weights: mean squares 3.5 and 2.75 → 0.56 and 0.44. Elected signs +, −, + (sum 0), +.
    assert sce(1.0) == pytest.approx([0.56 * 1 + 0.44 * 3, -2.0, 0.0, 3.0], rel=1e-12)


def test_sce_select_topk_keeps_the_highest_variance_positions():
    # Population variances: 1, 2.25, 0, 4; three are non-zero.
    assert sce(0.5) == [0.0, 0.0, 0.0, 3.0]  # int(3 · 0.5) = 1 position
    assert sce(0.7) == [0.0, -2.0, 0.0, 3.0]  # int(3 · 0.7) = 2 positions
    assert sce(0.0) == SCE_BASE
    # Equal variances: the lower index wins; then the sum is 0 → elected sign +.
    assert sce(0.5, ([0.0, 0.0], [1.0, 1.0], [-1.0, -1.0])) == [1.0, 0.0]


def test_sce_uses_uniform_weights_when_the_deltas_are_tiny():
    # Mean squares 5e-9 and 4.5e-8 sum below 1e-6: uniform weights, not 0.1 / 0.9.
    assert sce(1.0, ([0.0, 0.0], [1e-4, 0.0], [3e-4, 0.0])) == pytest.approx([2e-4, 0.0], rel=1e-12)


# ---- ram, ramplus_tl ------------------------------------------------------------------------------------


def test_ram_by_hand():
    base = [0.0, 0.0, 0.0, 0.0]
    x1, x2, x3 = [1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 4.0, 3.0], [1e-6, 0.0, 0.0, 1.0]
    # x3's 1e-6 is below epsilon: index 0 is x1's alone. Index 2 and 3 are shared: averaged.
    assert run("ram", [base, x1, x2, x3], base_index=0, dtype=torch.float64).tolist() == [1.0, 0.0, 3.0, 2.0]
    loose = run("ram", [base, x1, x2, x3], base_index=0, dtype=torch.float64, epsilon=1e-7)
    assert loose.tolist() == pytest.approx([(1 + 1e-6) / 2, 0.0, 3.0, 2.0], rel=1e-12)


def test_ramplus_tl_boosts_unique_entries_by_the_clipped_overlap_ratio():
    base = [0.0] * 12
    x1 = [1.0] * 10 + [1.0, 0.0]  # 10 unique, 1 shared → ρ = 0.1 → λ = 1 + 0.1·0.1
    x2 = [0.0] * 10 + [3.0, 5.0]  # 1 unique, 1 shared → ρ = 1, clipped to 0.2 → λ = 1.02
    result = run("ramplus_tl", [base, x1, x2], base_index=0, dtype=torch.float64)
    assert result.tolist() == pytest.approx([1.01] * 10 + [2.0, 5.1], rel=1e-12)
    plain = run("ramplus_tl", [base, x1, x2], base_index=0, dtype=torch.float64, r=0.0)
    assert plain.tolist() == run("ram", [base, x1, x2], base_index=0, dtype=torch.float64).tolist()


# ---- nearswap -------------------------------------------------------------------------------------------


def test_nearswap_by_hand():
    base, other = [0.0, 0.0, 0.0, 7.0], [0.25, 1.0, -2.0, 7.0]
    # w = clamp(0.5 / |b − x|, 0, 1): 1 (close), 0.5, 0.25, and 1 where they are equal.
    result = run("nearswap", [base, other], base_index=0, t=0.5)
    assert result.tolist() == [0.25, 0.5, -0.5, 7.0]
    swapped = run("nearswap", [other, base], base_index=1, t=0.5)
    assert swapped.tolist() == result.tolist()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("t", [0.0, 1e-3, 0.02])
def test_nearswap_of_stored_inputs_is_the_float32_merge_bit_for_bit(dtype, t):
    from guiapp.merging.methods._stored import STORED_CHUNK  # noqa: PLC0415

    generator = torch.Generator().manual_seed(int(t * 1000))
    numel = STORED_CHUNK * 2 + 7  # three chunks, the last a short one
    base = torch.randn(numel, generator=generator) * 0.05
    other = base + torch.randn(numel, generator=generator) * 0.01
    other[:100] = base[:100]  # equal entries: the distance floor
    for base_index, tensors in ((0, [base, other]), (1, [other, base])):
        assert_stored_merge_is_the_float32_merge("nearswap", tensors, dtype, base_index=base_index, t=t)


# ---- arcee_fusion ---------------------------------------------------------------------------------------


def arcee_reference(base: np.ndarray, other: np.ndarray) -> np.ndarray:
    def softmax(v):
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    p, q = softmax(other) + 1e-8, softmax(base) + 1e-8
    importance = np.abs(other - base) * (p * np.log(p / q)).sum(axis=-1, keepdims=True)
    ordered = np.sort(importance.ravel())
    last = ordered.size - 1
    q1, median, q3 = (ordered[int(q * last)] for q in (0.25, 0.5, 0.75))
    return np.where(importance >= median + 1.5 * (q3 - q1), other, base)


def test_arcee_fusion_takes_only_the_important_changes():
    generator = torch.Generator().manual_seed(7)
    base = torch.randn(12, 10, generator=generator).double()
    other = base + torch.randn(12, 10, generator=generator).double() * torch.rand(12, 1, generator=generator) ** 4
    result = run("arcee_fusion", [base, other], base_index=0, dtype=torch.float64)
    expected = arcee_reference(base.numpy(), other.numpy())
    assert np.array_equal(result.numpy(), expected)
    taken = int((result == other).sum())
    assert 0 < taken < result.numel()


def test_arcee_fusion_threshold_by_hand():
    # One row: importance = |δ| · KL (the same factor for every entry), so the cut is on |δ| alone.
    base = torch.zeros(1, 9, dtype=torch.float64)
    other = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 9.0]], dtype=torch.float64)
    # Sorted |δ| positions 2, 4, 6 → q1 0.3, median 0.5, q3 0.7 → threshold 0.5 + 1.5·0.4 = 1.1.
    result = run("arcee_fusion", [base, other], base_index=0, dtype=torch.float64)
    assert result.tolist() == [[0.0] * 8 + [9.0]]


def test_arcee_fusion_samples_the_quartiles_of_large_tensors():
    generator = torch.Generator().manual_seed(8)
    base = torch.randn(1100, 1000, generator=generator)
    other = base + torch.randn(1100, 1000, generator=generator) * 0.1
    result = run("arcee_fusion", [base, other], base_index=0, seed=3)
    exact = arcee_reference(base.double().numpy(), other.double().numpy())
    sampled_fraction = float((result == other).float().mean())
    exact_fraction = float((exact == other.double().numpy()).mean())
    assert sampled_fraction == pytest.approx(exact_fraction, abs=0.003)
    assert torch.equal(result, run("arcee_fusion", [base, other], base_index=0, seed=3))


# ---- passthrough ----------------------------------------------------------------------------------------


def test_passthrough_copies_and_scales():
    assert run("passthrough", [[1.0, -2.0]]).tolist() == [1.0, -2.0]
    assert run("passthrough", [[1.0, -2.0]], model_params=[{"scale": 0.5}]).tolist() == [0.5, -1.0]
    with pytest.raises(IncompatibleModelsError, match="comes from 2 models"):
        run("passthrough", [[1.0], [2.0]])
