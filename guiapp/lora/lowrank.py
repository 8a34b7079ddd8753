"""Truncated SVD and rank selection for LoRA extraction, always in float32 or float64.

Linear-algebra kernels (SVD, QR) do not exist for half types on CPU or CUDA, so every entry point upcasts a
bf16/fp16 matrix to float32 before touching it: the `"svd_cuda_gesvdj" not implemented for 'BFloat16'` class of
crash cannot happen here.

Two solvers:
- "randomized" (default): Halko, Martinsson & Tropp (2011), Algorithm 4.4: a Gaussian sketch with oversampling,
  a few power iterations re-orthonormalised by QR after every product, then the exact SVD of the small
  projected matrix. Its cost is a handful of (out × in × sketch) matrix products instead of a full SVD.
- "exact": thin `torch.linalg.svd`, the Eckart–Young optimum.

Rank rules: a fixed rank, an energy fraction of ‖Δ‖²_F, or a threshold relative to the largest singular value;
always capped by `max_rank` and by min(out, in). For the energy and threshold rules the randomized solver does
not know the rank in advance, so it grows its sketch (32, 64, 128, … directions) until the directions it has
found certify the rule: their energy reaches the target, or the smallest of them falls below the threshold.
Once the sketch would exceed a quarter of min(out, in) a full SVD is cheaper and more exact, so it switches
to the exact solver. Because the randomized estimates of singular values can only undershoot, the rank it
picks for an energy target is never smaller than the exact one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from guiapp.errors import SettingsError
from guiapp.facts.choices import RANK_MODES, SOLVERS, RankMode, Solver
from guiapp.facts.dtypes import COMPUTE, compute_for, dtype_name
from guiapp.facts.wording import say

POWER_ITERATIONS = 3
FIRST_SKETCH_RANK = 32
# Above this fraction of min(out, in) a sketch costs about as much as the full SVD, which is exact.
SKETCH_FRACTION_LIMIT = 0.25


@dataclass(frozen=True)
class RankRule:
    """How many singular directions each module keeps.

    `value` is the rank for "fixed", the fraction of ‖Δ‖²_F to keep for "energy" (0 < e ≤ 1), and the fraction
    of the largest singular value below which directions are dropped for "threshold" (0 < τ < 1).
    """

    mode: RankMode = "fixed"
    value: float = 32
    max_rank: int | None = None

    def validate(self) -> None:
        """Raise SettingsError naming the setting (its `key`) when the rule cannot be used."""
        if self.mode not in RANK_MODES:
            raise SettingsError(f'"{self.mode}" is not a rank mode.', hint=say("Use {rank_modes}."),
                                key="rank_mode")
        if self.mode == "fixed" and (self.value != int(self.value) or self.value < 1):
            raise SettingsError(
                f"The rank must be a whole number of at least 1 (got {self.value}).", hint=say("Example: {rank:32}"),
                key="rank",
            )
        if self.mode == "energy" and not 0 < self.value <= 1:
            raise SettingsError(
                f"The energy to keep must be a fraction between 0 and 1 (got {self.value}).",
                hint=say("Example: {energy:0.9} keeps 90 % of each update's energy."), key="rank",
            )
        if self.mode == "threshold" and not 0 < self.value < 1:
            raise SettingsError(
                f"The threshold must be a fraction between 0 and 1 of the largest singular value (got {self.value}).",
                hint=say("Example: {threshold:0.05} keeps directions at least 5 % as strong as the strongest."), key="rank",
            )
        if self.max_rank is not None and self.max_rank < 1:
            raise SettingsError(
                f"The maximum rank must be at least 1 (got {self.max_rank}).", hint=say("Example: {max_rank:128}"),
                key="max_rank",
            )

    def cap(self, shape: tuple[int, int]) -> int:
        """The largest rank this rule may give a matrix of `shape`."""
        limit = min(shape)
        if self.mode == "fixed":
            limit = min(limit, int(self.value))
        if self.max_rank is not None:
            limit = min(limit, self.max_rank)
        return max(1, limit)


@dataclass(frozen=True)
class Decomposition:
    """Δ ≈ left @ right: left = U·diag(√s) (out × r), right = diag(√s)·Vᵀ (r × in), in float32/64."""

    left: torch.Tensor
    right: torch.Tensor
    singular_values: torch.Tensor
    total_energy: float

    @property
    def rank(self) -> int:
        return int(self.singular_values.numel())

    @property
    def retained_energy(self) -> float:
        """The fraction of ‖Δ‖²_F the kept directions hold (1.0 for a zero matrix)."""
        if self.total_energy <= 0:
            return 1.0
        return min(1.0, _energy(self.singular_values) / self.total_energy)


def compute_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else (bf16, fp16, fp8, float32) is decomposed in float32."""
    return getattr(torch, compute_for(dtype_name(dtype)))


def decompose(
    delta: torch.Tensor, rule: RankRule, solver: Solver = "randomized", *, seed: int = 0
) -> Decomposition:
    """Factor the 2-D `delta` into LoRA factors of the rank `rule` chooses.

    Half-precision input is upcast to float32 first. Raises ValueError for a matrix that is not 2-D or holds
    NaN/infinity (the caller names the tensor), SettingsError for an invalid rule or solver.
    """
    rule.validate()
    if solver not in SOLVERS:
        raise SettingsError(f'"{solver}" is not a solver.', hint="Use randomized (fast) or exact.", key="solver")
    if delta.ndim != 2:
        raise ValueError(f"expected a matrix, got a tensor of shape {tuple(delta.shape)}")
    matrix = delta.to(compute_dtype_for(delta.dtype))
    total = float(torch.linalg.vector_norm(matrix)) ** 2
    if not math.isfinite(total):
        raise ValueError("the update contains NaN or infinity")
    cap = rule.cap(tuple(matrix.shape))
    if solver == "exact":
        u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
    else:
        u, s, vh = _randomized_for_rule(matrix, rule, cap, total, seed)
    rank = choose_rank(s, total, rule, cap)
    root = s[:rank].sqrt()
    left = u[:, :rank] * root
    right = root[:, None] * vh[:rank]
    return Decomposition(left, right, s[:rank], total)


def choose_rank(singular_values: torch.Tensor, total_energy: float, rule: RankRule, cap: int) -> int:
    """The rank `rule` picks from descending `singular_values` of a matrix with ‖Δ‖²_F = `total_energy`.

    Never below 1 nor above `cap` or the number of singular values known.
    """
    available = min(cap, int(singular_values.numel()))
    if rule.mode == "fixed":
        rank = available
    elif rule.mode == "energy":
        kept = torch.cumsum(singular_values.detach().cpu().double().square(), 0)
        reached = torch.nonzero(kept >= rule.value * total_energy * (1 - 1e-9))
        rank = int(reached[0]) + 1 if reached.numel() else available
    else:
        strongest = float(singular_values[0]) if singular_values.numel() else 0.0
        rank = int((singular_values >= rule.value * strongest).sum())
    return max(1, min(rank, available))


def truncated_svd(
    matrix: torch.Tensor,
    rank: int,
    *,
    oversample: int | None = None,
    power_iterations: int = POWER_ITERATIONS,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The `rank` leading singular triplets (U, s, Vᵀ) of `matrix` by randomized range finding.

    `matrix` must be float32 or float64 (ValueError otherwise: half types have no QR/SVD kernels). The result
    has min(rank, min(shape)) triplets; when the sketch would cover the whole matrix a thin exact SVD is used.
    """
    if dtype_name(matrix.dtype) not in COMPUTE:
        raise ValueError(f"truncated_svd needs float32 or float64, got {matrix.dtype}")
    rows, cols = matrix.shape
    smallest = min(rows, cols)
    rank = max(1, min(rank, smallest))
    sketch = min(smallest, rank + (oversample if oversample is not None else default_oversample(rank)))
    if sketch >= smallest:
        u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
        return u[:, :rank], s[:rank], vh[:rank]
    generator = torch.Generator(device=matrix.device).manual_seed(seed)
    probe = torch.randn(cols, sketch, generator=generator, device=matrix.device, dtype=matrix.dtype)
    basis = torch.linalg.qr(matrix @ probe).Q
    for _ in range(power_iterations):
        # Re-orthonormalising after each product keeps the small singular directions from drowning in rounding.
        basis = torch.linalg.qr(matrix.T @ basis).Q
        basis = torch.linalg.qr(matrix @ basis).Q
    small_u, s, vh = torch.linalg.svd(basis.T @ matrix, full_matrices=False)
    return (basis @ small_u[:, :rank]), s[:rank], vh[:rank]


def default_oversample(rank: int) -> int:
    """Extra sketch directions beyond `rank`: at least 10, and a quarter of the rank for large ranks."""
    return max(10, rank // 4)


# The time a decomposition takes, per element of the matrix, in units of one direction of a randomized sketch
# (its passes over the matrix included): a fixed part (the norms, the relative error, the QRs' bookkeeping) worth
# about this many directions, plus the sketch's own directions. Measured on one and two threads, 512×512 to
# 5632×2048, ranks 16–256: rank 32 takes 1.3 times rank 16, not 2, and a thin exact SVD about 1.3 directions per
# row of the smaller side (a 2048-square one 50 times a rank-16 sketch).
_FIXED_DIRECTIONS = 29.0
_EXACT_DIRECTIONS_PER_SIDE = 1.3
# Reading and differencing a tensor that is only compared (embeddings saved whole, norms), per byte of the pair,
# against a rank-16 decomposition per byte: the reads run beside the decompositions but alone for these.
_COMPARE_WORK_PER_BYTE = 0.25
# The unit of work: a rank-16 randomized decomposition of a bfloat16 pair costs its bytes (4 per element).
_REFERENCE_DIRECTIONS = _FIXED_DIRECTIONS + 16 + 10


def decomposition_directions(shape: tuple[int, int], rule: RankRule, solver: Solver = "randomized") -> float:
    """How many sketch directions' worth of passes `decompose` makes over a matrix of `shape` (its fixed part
    included), by the same steps it takes. For the energy and threshold rules, as for an update that is not low
    rank, the usual case of a full fine-tune: the sketch grows until the rule's cap or the exact SVD. Never raises."""
    smallest = max(1, min(shape))
    exact = _EXACT_DIRECTIONS_PER_SIDE * smallest
    cap = rule.cap(shape)
    if solver == "exact":
        return _FIXED_DIRECTIONS + exact
    directions = _FIXED_DIRECTIONS
    rank = cap if rule.mode == "fixed" else min(cap, FIRST_SKETCH_RANK)
    while True:
        sketch = min(smallest, rank + default_oversample(rank))
        if (rule.mode != "fixed" and sketch > SKETCH_FRACTION_LIMIT * smallest) or sketch >= smallest:
            return directions + exact
        directions += sketch
        if rule.mode == "fixed" or rank >= cap:
            return directions
        rank = min(cap, 2 * rank)


def module_work(shape: tuple[int, ...], pair_bytes: int, rule: RankRule | None, solver: Solver = "randomized"
                ) -> float:
    """The work of one module of an extraction, in bytes of a bfloat16 pair decomposed at rank 16 (what the time
    estimate's rate and the progress bar count): its decomposition by `rule` when it has one (a 2-D weight that is
    decomposed), else the reading and comparing of its `pair_bytes`. Never raises."""
    if rule is None or len(shape) != 2:
        return _COMPARE_WORK_PER_BYTE * pair_bytes
    rows, cols = shape
    return 4 * rows * cols * decomposition_directions((rows, cols), rule, solver) / _REFERENCE_DIRECTIONS


def relative_error(delta: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> float:
    """‖Δ − left·right‖_F / ‖Δ‖_F computed in the dtype of `delta` (0.0 when Δ is zero)."""
    norm = float(torch.linalg.matrix_norm(delta))
    if norm == 0:
        return 0.0
    residual = torch.addmm(delta, left.to(delta.dtype), right.to(delta.dtype), alpha=-1)
    return float(torch.linalg.matrix_norm(residual)) / norm


def _randomized_for_rule(
    matrix: torch.Tensor, rule: RankRule, cap: int, total: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    smallest = min(matrix.shape)
    rank = cap if rule.mode == "fixed" else min(cap, FIRST_SKETCH_RANK)
    while True:
        if rank + default_oversample(rank) > SKETCH_FRACTION_LIMIT * smallest and rule.mode != "fixed":
            return torch.linalg.svd(matrix, full_matrices=False)
        u, s, vh = truncated_svd(matrix, rank, seed=seed)
        if rule.mode == "fixed" or rank >= cap or _rule_certified(s, total, rule):
            return u, s, vh
        rank = min(cap, 2 * rank)


def _rule_certified(singular_values: torch.Tensor, total: float, rule: RankRule) -> bool:
    """Whether the directions found so far already contain the rank the rule will pick."""
    if rule.mode == "energy":
        return _energy(singular_values) >= rule.value * total
    return float(singular_values[-1]) < rule.value * float(singular_values[0])


def _energy(singular_values: torch.Tensor) -> float:
    # float64 on the CPU: some devices (MPS) have no float64, and these vectors are tiny.
    return float(singular_values.detach().cpu().double().square().sum())
