"""The decomposition itself: planted ranks, the randomized solver against the optimum, rank rules, half inputs."""

from __future__ import annotations

import pytest
import torch

from guiapp.errors import SettingsError
from guiapp.lora.lowrank import RankRule, choose_rank, decompose, relative_error, truncated_svd


def orthonormal(rows: int, cols: int, seed: int) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))).Q


def with_spectrum(singular_values: torch.Tensor, rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    k = singular_values.numel()
    return (orthonormal(rows, k, seed) * singular_values) @ orthonormal(cols, k, seed + 1).T


def optimum(matrix: torch.Tensor, rank: int) -> float:
    """The Eckart–Young error of the best rank-`rank` approximation, relative to ‖matrix‖_F."""
    s = torch.linalg.svdvals(matrix.double())
    return float(s[rank:].square().sum().sqrt() / s.square().sum().sqrt())


@pytest.mark.parametrize("solver", ["randomized", "exact"])
def test_planted_rank_is_recovered_to_the_noise_level(solver):
    generator = torch.Generator().manual_seed(3)
    planted = torch.randn(300, 12, generator=generator) @ torch.randn(12, 200, generator=generator) * 0.01
    noise = torch.randn(300, 200, generator=generator) * 1e-5
    delta = planted + noise
    noise_level = float(noise.norm() / delta.norm())
    for rank in (12, 16):
        parts = decompose(delta, RankRule("fixed", rank), solver)
        error = relative_error(delta, parts.left, parts.right)
        assert parts.rank == rank
        assert error <= noise_level * 1.01
        assert error >= noise_level * (1 - rank / 200) * 0.9  # it cannot beat the noise outside its subspace
    below = decompose(delta, RankRule("fixed", 6), solver)
    assert relative_error(delta, below.left, below.right) > 100 * noise_level


@pytest.mark.parametrize("decay", ["power", "exponential"])
@pytest.mark.parametrize("rank", [4, 16, 48])
def test_randomized_is_within_two_percent_of_the_optimum_on_a_decaying_spectrum(decay, rank):
    index = torch.arange(1, 201, dtype=torch.float32)
    spectrum = index**-0.6 if decay == "power" else torch.exp(-index / 25)
    delta = with_spectrum(spectrum, 400, 256, seed=7)
    randomized = decompose(delta, RankRule("fixed", rank), "randomized")
    exact = decompose(delta, RankRule("fixed", rank), "exact")
    best = optimum(delta, rank)
    assert relative_error(delta, exact.left, exact.right) == pytest.approx(best, rel=1e-3)
    assert relative_error(delta, randomized.left, randomized.right) <= 1.02 * best


SPECTRUM = torch.tensor([8.0, 4.0, 2.0, 1.0])  # energy shares: 64, 16, 4, 1 of 85


@pytest.mark.parametrize("solver", ["randomized", "exact"])
@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (RankRule("fixed", 3), 3),
        (RankRule("fixed", 500), 64),  # capped by min(out, in)
        (RankRule("fixed", 50, max_rank=5), 5),
        (RankRule("energy", 0.75), 1),  # 64/85 = 0.753
        (RankRule("energy", 0.9), 2),  # 80/85 = 0.941
        (RankRule("energy", 0.95), 3),  # 84/85 = 0.988
        (RankRule("energy", 0.999), 4),
        (RankRule("energy", 0.999, max_rank=2), 2),
        (RankRule("threshold", 0.3), 2),  # keeps s >= 2.4
        (RankRule("threshold", 0.2), 3),  # keeps s >= 1.6
        (RankRule("threshold", 0.1), 4),
    ],
)
def test_rank_rules_choose_the_expected_rank(solver, rule, expected):
    delta = with_spectrum(SPECTRUM, 96, 64, seed=11) + 1e-7 * torch.randn(96, 64, generator=torch.Generator().manual_seed(0))
    assert decompose(delta, rule, solver).rank == expected


def test_energy_rule_grows_the_sketch_until_the_target_is_met():
    # 90 equal directions: an energy target of 0.95 needs 86 of them, far beyond the first sketch of 32.
    delta = with_spectrum(torch.ones(90), 600, 500, seed=5)
    randomized = decompose(delta, RankRule("energy", 0.95), "randomized")
    exact = decompose(delta, RankRule("energy", 0.95), "exact")
    assert randomized.rank == exact.rank == 86
    assert randomized.retained_energy >= 0.95


def test_choose_rank_never_returns_zero_or_more_than_known():
    s = torch.tensor([3.0, 2.0, 1.0])
    assert choose_rank(s, 14.0, RankRule("threshold", 0.99), cap=10) == 1
    assert choose_rank(s, 1e9, RankRule("energy", 0.9), cap=10) == 3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_input_is_decomposed_in_float32(dtype):
    delta = with_spectrum(SPECTRUM, 64, 48).to(dtype)
    parts = decompose(delta, RankRule("fixed", 4), "randomized")
    assert parts.left.dtype == parts.right.dtype == torch.float32
    # Rounding to `dtype` adds full-rank noise, so the optimum itself is not zero.
    assert relative_error(delta.float(), parts.left, parts.right) <= 1.02 * optimum(delta.float(), 4) < 0.01
    with pytest.raises(ValueError, match="float32 or float64"):
        truncated_svd(delta, 4)


def test_float64_input_stays_float64():
    parts = decompose(with_spectrum(SPECTRUM, 40, 30).double(), RankRule("fixed", 2), "exact")
    assert parts.left.dtype == torch.float64


@pytest.mark.parametrize(
    "rule",
    [RankRule("fixed", 0), RankRule("fixed", 2.5), RankRule("energy", 1.5), RankRule("energy", 0),
     RankRule("threshold", 1.0), RankRule("fixed", 4, max_rank=0), RankRule("median", 3)],
)
def test_invalid_rules_are_refused(rule):
    with pytest.raises(SettingsError):
        decompose(torch.ones(4, 4), rule)


def test_non_finite_update_is_refused():
    delta = torch.ones(8, 8)
    delta[2, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        decompose(delta, RankRule("fixed", 2))


def test_the_cost_model_follows_the_solvers_steps():
    from guiapp.lora.lowrank import decomposition_directions

    square = (1024, 1024)
    fixed = [decomposition_directions(square, RankRule("fixed", rank)) for rank in (8, 16, 32, 128)]
    assert fixed == sorted(fixed) and fixed[2] < 2 * fixed[1]  # a fixed part: rank 32 is not twice rank 16
    exact = decomposition_directions(square, RankRule("fixed", 16), "exact")
    assert exact > 5 * fixed[-1]
    assert decomposition_directions((2048, 2048), RankRule("fixed", 16), "exact") > 1.9 * exact  # grows with size
    # A full-rank update under the energy rule grows its sketch until the exact SVD takes over.
    assert decomposition_directions(square, RankRule("energy", 0.9)) > exact
    # A rank the matrix cannot hold is the exact SVD of the whole matrix.
    assert decomposition_directions((64, 64), RankRule("fixed", 60)) == decomposition_directions(
        (64, 64), RankRule("fixed", 60), "exact")
