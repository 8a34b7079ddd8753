"""The task-vector family: sparsifiers, rescale, sign consensus, normalize and lambda.

Deterministic methods are checked against an element-by-element reference written here from the spec (and
against values worked out by hand); the random sparsifiers (DARE, DELLA) against their keep probabilities.
"""

from __future__ import annotations

import pytest
import torch

from guiapp.errors import RecipeError
from tests.methods.helpers import run, run_with_stats


def keep_largest(delta: list[float], density: float) -> set[int]:
    if density >= 1:
        return set(range(len(delta)))
    if density <= 0:
        return set()
    k = max(1, int(density * len(delta)))
    return set(sorted(range(len(delta)), key=lambda i: (-abs(delta[i]), i))[:k])


def keep_window(delta: list[float], density: float, gamma: float) -> set[int]:
    n = len(delta)
    if density >= 1:
        return set(range(n))
    target, n_top = int(density * n), int(gamma * n)
    n_bottom = max(0, n - target - n_top)
    # Ascending by magnitude; among equal magnitudes the lower index counts as the larger one.
    ascending = sorted(range(n), key=lambda i: (abs(delta[i]), -i))
    return set(ascending[n_bottom : n_bottom + target])


def reference_merge(base, models, weights, keeps, *, consensus, normalize, lam=1.0, rescale=False):
    """docs/spec/merge-methods.md §2 steps 1-5, one element at a time, in Python floats."""
    deltas = []
    for x, keep in zip(models, keeps):
        delta = [xv - bv for xv, bv in zip(x, base)]
        kept = [v if j in keep else 0.0 for j, v in enumerate(delta)]
        before, after = sum(abs(v) for v in delta), sum(abs(v) for v in kept)
        if rescale and len(keep) < len(delta) and before >= 1e-7 and after >= 1e-7:
            kept = [v * before / after for v in kept]
        deltas.append(kept)
    out = []
    for j, b in enumerate(base):
        weighted = [w * d[j] for w, d in zip(weights, deltas)]
        if consensus:
            elected = 1 if sum(weighted) >= 0 else -1
            agree = [v != 0 and (v > 0) == (elected > 0) for v in weighted]
            mixed = sum(v for v, a in zip(weighted, agree) if a)
            divisor = sum(w for w, a in zip(weights, agree) if a) or 1.0
        else:
            mixed = sum(weighted)
            divisor = sum(weights) if abs(sum(weights)) >= 1e-8 else 1.0
        if normalize:
            mixed /= divisor
        out.append(b + mixed * lam)
    return out


def random_case(seed: int, n_models: int, n: int = 60, levels: int = 7):
    """Base and models with few distinct delta magnitudes, so ties at every cut are common."""
    generator = torch.Generator().manual_seed(seed)
    base = (torch.randn(n, generator=generator) * 0.1).double()
    models = [
        base + (torch.randint(-levels, levels + 1, (n,), generator=generator).double() / levels)
        for _ in range(n_models)
    ]
    return base.tolist(), [m.tolist() for m in models]


def test_task_arithmetic_by_hand():
    base, x1, x2 = [1.0, 2.0, 3.0], [2.0, 2.0, 5.0], [0.0, 3.0, 3.0]
    params = [{}, {"weight": 1.0}, {"weight": 0.5}]
    result = run("task_arithmetic", [base, x1, x2], base_index=0, model_params=params)
    assert result.tolist() == [1.5, 2.5, 5.0]
    normalized = run("task_arithmetic", [base, x1, x2], base_index=0, model_params=params, normalize=True)
    assert normalized.tolist() == pytest.approx([1 + 0.5 / 1.5, 2 + 0.5 / 1.5, 3 + 2 / 1.5])
    scaled = run("task_arithmetic", [base, x1, x2], base_index=0, model_params=params, **{"lambda": 2.0})
    assert scaled.tolist() == [2.0, 3.0, 7.0]


def test_task_arithmetic_allows_negative_weights_and_the_base_anywhere():
    x1, base = [3.0, 1.0], [1.0, 1.0]
    result = run("task_arithmetic", [x1, base], base_index=1, model_params=[{"weight": -1.0}, {}])
    assert result.tolist() == [-1.0, 1.0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("weights", [(1.0, 0.5, -0.3), (0.3, 0.3, 0.4), (2.0, -1.0, 0.5)])
@pytest.mark.parametrize(("normalize", "lam"), [(False, 1.0), (True, 1.0), (False, 0.7), (True, 1.3)])
def test_task_arithmetic_of_stored_inputs_is_the_float32_merge_bit_for_bit(dtype, weights, normalize, lam):
    from guiapp.merging.methods._stored import STORED_CHUNK  # noqa: PLC0415
    from tests.methods.helpers import assert_stored_merge_is_the_float32_merge  # noqa: PLC0415

    generator = torch.Generator().manual_seed(len(weights) + int(normalize))
    numel = STORED_CHUNK * 2 + 7  # three chunks, the last a short one
    base = torch.randn(numel, generator=generator) * 0.05
    for count in (1, 2, 3):
        tensors = [base] + [base + torch.randn(numel, generator=generator) * 0.01 for _ in range(count)]
        params = [{}] + [{"weight": weight} for weight in weights[:count]]
        assert_stored_merge_is_the_float32_merge("task_arithmetic", tensors, dtype, base_index=0, model_params=params,
                                                 normalize=normalize, **{"lambda": lam})


@pytest.mark.parametrize("device", ["cuda", "mps", "xpu", "cuda:1"])
def test_stored_inputs_are_merged_in_chunks_on_the_cpu_only(device):
    # The chunks keep a CPU core's float32 copies in its cache; on an accelerator each chunk would be several kernel
    # launches (about a million for a 7 B model), so there the block is one chunk.
    from guiapp.merging.methods._stored import STORED_CHUNK, stored_chunk_entries  # noqa: PLC0415

    numel = STORED_CHUNK * 30 + 1
    assert stored_chunk_entries(torch.device("cpu"), numel) == STORED_CHUNK
    assert stored_chunk_entries(torch.device("cpu"), 5) == 5
    assert stored_chunk_entries(torch.device(device), numel) == numel


def test_stored_inputs_on_a_device_without_chunks_merge_in_one_pass():
    # "meta" stands in for an accelerator here: no data, but the one-chunk loop runs through to a whole result.
    from guiapp.merging.methods import get_method  # noqa: PLC0415
    from tests.methods.helpers import context  # noqa: PLC0415

    tensors = [torch.empty(1000, device="meta") for _ in range(3)]
    stored = context("task_arithmetic", tensors, base_index=0, model_params=[{}, {"weight": 0.5}, {"weight": 0.5}],
                     dtype=torch.bfloat16)
    merged = get_method("task_arithmetic").merge_stored(stored)
    assert (merged.device.type, merged.dtype, merged.shape) == ("meta", torch.bfloat16, (1000,))


def test_ties_by_hand_with_a_tie_at_the_cut_and_an_all_zero_entry():
    base = [0.0, 0.0, 0.0, 0.0]
    x1, x2 = [3.0, -1.0, 0.5, -2.0], [-1.0, 2.0, 0.5, -2.0]
    # x1 keeps 3 and -2; x2's magnitudes [1, 2, 0.5, 2] keep indices 1 and 3. Elected signs: +, +, + (sum 0), -.
    params = [{}, {"weight": 1.0, "density": 0.5}, {"weight": 1.0, "density": 0.5}]
    result, stats = run_with_stats("ties", [base, x1, x2], base_index=0, model_params=params)
    assert result.tolist() == [3.0, 2.0, 0.0, -2.0]
    assert stats["kept_fraction"] == 0.5


def test_sign_consensus_counts_a_zero_sum_as_positive_and_zero_entries_as_no_vote():
    base, x1, x2 = [0.0, 0.0, 5.0], [1.0, 0.0, 5.0], [-1.0, 0.0, 3.0]
    params = [{}, {"weight": 1.0}, {"weight": 1.0}]
    assert run("ties", [base, x1, x2], base_index=0, model_params=params).tolist() == [1.0, 0.0, 3.0]
    unnormalized = run("ties", [base, x1, x2], base_index=0, model_params=params, normalize=False)
    assert unnormalized.tolist() == [1.0, 0.0, 3.0]
    # A negative weight flips the sign that votes: the weighted deltas are [-1, 0, 0] and [-1, 0, -2].
    negative = [{}, {"weight": -1.0}, {"weight": 1.0}]
    result = run("ties", [base, x1, x2], base_index=0, model_params=negative, normalize=False)
    assert result.tolist() == [-2.0, 0.0, 3.0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("method", ["ties", "breadcrumbs", "breadcrumbs_ties"])
def test_deterministic_methods_match_the_reference(method, seed):
    base, models = random_case(seed, n_models=3)
    weights, densities, gammas = [1.0, 0.6, -0.3], [0.5, 0.3, 0.85], [0.1, 0.0, 0.3]
    if method == "ties":
        keeps = [keep_largest([x - b for x, b in zip(m, base)], d) for m, d in zip(models, densities)]
    else:
        keeps = [
            keep_window([x - b for x, b in zip(m, base)], d, g) for m, d, g in zip(models, densities, gammas)
        ]
    consensus = method != "breadcrumbs"
    for normalize, lam, rescale in [(True, 1.0, False), (False, 0.7, True)]:
        params = [{}] + [
            {"weight": w, "density": d, "gamma": g} for w, d, g in zip(weights, densities, gammas)
        ]
        result = run(
            method, [base, *models], base_index=0, model_params=params, dtype=torch.float64,
            normalize=normalize, rescale=rescale, **{"lambda": lam},
        )
        expected = reference_merge(
            base, models, weights, keeps, consensus=consensus, normalize=normalize, lam=lam, rescale=rescale
        )
        assert result.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_magnitude_pruning_limits():
    base, x = [0.0] * 4, [4.0, -3.0, 2.0, 1.0]
    assert run("ties", [base, x], base_index=0, model_params=[{}, {"weight": 1.0, "density": 0.0}]).tolist() == base
    # int(0.1 · 4) = 0, but magnitude pruning always keeps at least one entry.
    tiny = run("ties", [base, x], base_index=0, model_params=[{}, {"weight": 1.0, "density": 0.1}])
    assert tiny.tolist() == [4.0, 0.0, 0.0, 0.0]
    full, stats = run_with_stats("ties", [base, x], base_index=0, model_params=[{}, {"weight": 2.0, "density": 1.0}])
    assert full.tolist() == x and stats["kept_fraction"] == 1.0


def test_rescale_matches_the_l1_norm_of_the_unpruned_delta():
    base, x = [0.0] * 4, [4.0, -3.0, 2.0, 1.0]
    result = run("ties", [base, x], base_index=0, model_params=[{}, {"weight": 1.0, "density": 0.5}], rescale=True)
    assert result.tolist() == pytest.approx([4.0 * 10 / 7, -3.0 * 10 / 7, 0.0, 0.0])


def test_rescale_is_skipped_when_the_kept_sum_is_negligible():
    base, x = [0.0, 0.0], [1e-8, 5e-9]  # L1 1.5e-8: below 1e-7, so no factor 1.5 for the kept entry
    params = [{}, {"weight": 1.0, "density": 0.5}]
    result = run("ties", [base, x], base_index=0, model_params=params, rescale=True, dtype=torch.float64)
    assert result.tolist() == [1e-8, 0.0]


def test_breadcrumbs_window_by_hand():
    base = [0.0] * 10
    x = [0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 1.0]

    def kept(density, gamma):
        params = [{}, {"weight": 1.0, "density": density, "gamma": gamma}]
        result = run("breadcrumbs", [base, x], base_index=0, model_params=params, dtype=torch.float64)
        return sorted(round(v, 6) for v in result.tolist() if v)

    # target 5, n_top 1 → the largest (1.0) dropped as an outlier, the 4 smallest dropped as noise.
    assert kept(0.5, 0.1) == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert kept(0.5, 0.0) == [0.6, 0.7, 0.8, 0.9, 1.0]
    # target 8 + n_top 3 > 10: nothing is cut at the bottom, so the 8 smallest stay.
    assert kept(0.8, 0.3) == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    assert kept(1.0, 0.3) == sorted(x)


def test_breadcrumbs_ties_at_both_cuts_follow_the_lowest_index_rule():
    base, x = [0.0] * 5, [1.0] * 5
    params = [{}, {"weight": 1.0, "density": 0.4, "gamma": 0.2}]
    result = run("breadcrumbs", [base, x], base_index=0, model_params=params)
    # All equal: rank order is index 0 (largest) … index 4; skip 1 outlier, keep the next 2.
    assert result.tolist() == [0.0, 1.0, 1.0, 0.0, 0.0]


def test_missing_base_tensor_is_refused_and_a_lone_base_is_copied():
    from guiapp.errors import IncompatibleModelsError

    with pytest.raises(IncompatibleModelsError, match="missing from the base model"):
        run("ties", [[1.0], [2.0]], base_index=None, model_params=[{"weight": 1.0}, {"weight": 1.0}])
    assert run("dare_ties", [[1.5, 2.0]], base_index=0).tolist() == [1.5, 2.0]


# ---- random sparsifiers -------------------------------------------------------------------------------------

N_LARGE = 200_000


def test_dare_keeps_each_entry_with_probability_density():
    base, x = torch.zeros(N_LARGE), torch.ones(N_LARGE)
    params = [{}, {"weight": 1.0, "density": 0.3}]
    plain, stats = run_with_stats("dare_linear", [base, x], base_index=0, model_params=params, rescale=False)
    kept = int((plain != 0).sum())
    assert kept / N_LARGE == pytest.approx(0.3, abs=0.005)  # about 7 standard deviations
    assert stats["kept_fraction"] == kept / N_LARGE
    assert set(plain.unique().tolist()) == {0.0, 1.0}

    rescaled = run("dare_linear", [base, x], base_index=0, model_params=params)  # rescale defaults to true
    assert torch.equal(rescaled != 0, plain != 0)  # same seed, same draws
    assert rescaled[rescaled != 0].unique().tolist() == pytest.approx([N_LARGE / kept], rel=1e-6)
    assert float(rescaled.double().abs().sum()) == pytest.approx(N_LARGE, rel=1e-6)


def test_dare_draws_follow_the_seed():
    base, x = torch.zeros(1000), torch.ones(1000)
    params = [{}, {"weight": 1.0, "density": 0.5}]
    first = run("dare_linear", [base, x], base_index=0, model_params=params, seed=1)
    again = run("dare_linear", [base, x], base_index=0, model_params=params, seed=1)
    other = run("dare_linear", [base, x], base_index=0, model_params=params, seed=2)
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_dare_ties_combines_independent_draws_with_consensus():
    base, x1, x2 = torch.zeros(N_LARGE), torch.ones(N_LARGE), torch.full((N_LARGE,), 2.0)
    params = [{}, {"weight": 1.0, "density": 0.5}, {"weight": 1.0, "density": 0.5}]
    result = run("dare_ties", [base, x1, x2], base_index=0, model_params=params, rescale=False)
    values, counts = result.unique(return_counts=True)
    assert values.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert (counts / N_LARGE).tolist() == pytest.approx([0.25] * 4, abs=0.005)


def test_della_keep_probability_grows_with_rank_in_each_row():
    rows, generator = 20_000, torch.Generator().manual_seed(5)
    magnitudes = torch.stack([torch.randperm(5, generator=generator) + 1.0 for _ in range(rows)])
    signs = torch.where(torch.rand(rows, 5, generator=generator) < 0.5, -1.0, 1.0)
    x = magnitudes * signs
    params = [{}, {"weight": 1.0, "density": 0.5, "epsilon": 0.2}]
    result, stats = run_with_stats(
        "della_linear", [torch.zeros(rows, 5), x], base_index=0, model_params=params, rescale=False
    )
    kept = result != 0
    assert torch.equal(result[kept], x[kept])
    for magnitude, probability in zip(range(1, 6), [0.3, 0.4, 0.5, 0.6, 0.7]):
        frequency = float(kept[magnitudes == magnitude].float().mean())
        assert frequency == pytest.approx(probability, abs=0.015), magnitude
    assert stats["kept_fraction"] == pytest.approx(0.5, abs=0.01)


def test_della_ranks_equal_magnitudes_by_lowest_index_first():
    rows = 20_000
    x = torch.ones(rows, 5)
    params = [{}, {"weight": 1.0, "density": 0.5, "epsilon": 0.2}]
    result = run("della_linear", [torch.zeros(rows, 5), x], base_index=0, model_params=params, rescale=False)
    frequencies = (result != 0).float().mean(dim=0).tolist()
    assert frequencies == pytest.approx([0.7, 0.6, 0.5, 0.4, 0.3], abs=0.015)


def test_della_treats_a_vector_as_one_row_and_rescales():
    n = 50_001
    x = torch.arange(1, n + 1, dtype=torch.float32).flip(0)
    params = [{}, {"weight": 1.0, "density": 0.4, "epsilon": 0.3}]
    result = run("della", [torch.zeros(n), x], base_index=0, model_params=params)
    assert float(result.double().sum()) == pytest.approx(float(x.double().sum()), rel=1e-6)
    kept = (result != 0).float()
    # The largest fifth (first entries here) is kept with mean probability 0.1 + 0.6·0.9 = 0.64, the smallest 0.16.
    fifth = n // 5
    assert float(kept[:fifth].mean()) == pytest.approx(0.64, abs=0.02)
    assert float(kept[-fifth:].mean()) == pytest.approx(0.16, abs=0.02)


def test_della_refuses_density_and_epsilon_outside_the_open_interval():
    params = [{}, {"weight": 1.0, "density": 0.9, "epsilon": 0.15}]
    with pytest.raises(RecipeError) as caught:
        run("della", [[0.0, 0.0], [1.0, 2.0]], base_index=0, model_params=params)
    assert "model-1" in str(caught.value) and "up_proj" in str(caught.value)
    assert "density 0.9" in str(caught.value) and caught.value.hint


def test_della_density_limits():
    x = [[0.0, 0.0], [1.0, 2.0]]
    zero = run("della", x, base_index=0, model_params=[{}, {"weight": 1.0, "density": 0.0, "epsilon": 0.15}])
    assert zero.tolist() == [0.0, 0.0]
    full = run("della", x, base_index=0, model_params=[{}, {"weight": 1.0, "density": 1.0, "epsilon": 0.5}])
    assert full.tolist() == [1.0, 2.0]
