"""The closed lists of choices a job setting takes, shared by the CLI's options, the engine's checks and the window."""

from __future__ import annotations

from typing import Literal, get_args

# How LoRA extraction factors each update: "randomized" (fast, within 2 % of the optimum) or "exact" (full SVD).
Solver = Literal["randomized", "exact"]
SOLVERS: tuple[str, ...] = get_args(Solver)

# How LoRA extraction picks each module's rank: a fixed rank, the smallest keeping a share of the energy, or the
# directions above a fraction of the largest singular value.
RankMode = Literal["fixed", "energy", "threshold"]
RANK_MODES: tuple[str, ...] = get_args(RankMode)

# What LoRA extraction does with changed embeddings and output head: store them whole, decompose them, or skip.
EmbeddingPolicy = Literal["save", "lora", "skip"]
EMBEDDING_POLICIES: tuple[str, ...] = get_args(EmbeddingPolicy)
