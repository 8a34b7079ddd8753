"""Would `extract-lora --dora` beat plain LoRA extraction at equal size? Reconstruction errors on generated pairs.

A DoRA module of rank r stores r·(out+in) factor entries plus `out` magnitudes: half a rank's worth more than a
LoRA of rank r. For each pair (a Llama-initialised weight W and a fine-tune F = W + Δ) it prints ‖result − F‖ / ‖Δ‖
for:
- LoRA r and LoRA r+1: W + the best rank-r (r+1) approximation of Δ (exact SVD, the Eckart–Young optimum);
- DoRA r, magnitudes only: the LoRA r direction, each output row rescaled to its best length against F;
- DoRA r, fitted: alternately the best rank-r update towards F with its rows rescaled by c, and the best c
  (a few rounds), then the best magnitudes.
"Equal size" is LoRA at rank r + out/(out+in) (squared error interpolated between r and r+1).

Pairs: a heavy-tailed full fine-tune delta (singular values ∝ i^-0.5, like real fine-tunes), a planted rank-32
update with 5 % noise, and the heavy-tailed delta plus a 2 % per-row rescaling of F (what a DoRA-trained model
changes; the case most favourable to DoRA). ‖Δ‖ is 3 % of ‖W‖.

Measured 2026-11 (1024² and 2048×512, ranks 16 and 64), fitted DoRA's error over LoRA's at equal size:
heavy-tailed 1.0009–1.0059, planted 1.0003–1.0315 (worse: the magnitudes buy less than the half rank they cost),
heavy-tailed + row scale 0.68–0.76 (better). On the extraction benchmark's pairs (the first two) DoRA does not
beat LoRA, so `extract-lora` has no --dora; it would pay only for fine-tunes that rescale whole rows.

Run: .venv/bin/python benchmarks/dora_extract.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guiapp.checkpoints.dora import dora_weight  # noqa: E402

FIT_ROUNDS = 6


def heavy_tailed(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    k = min(rows, cols)
    left = torch.linalg.qr(torch.randn(rows, k, generator=generator)).Q
    right = torch.linalg.qr(torch.randn(cols, k, generator=generator)).Q
    return (left * torch.arange(1, k + 1, dtype=torch.float32) ** -0.5) @ right.T


def planted(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    update = torch.randn(rows, 32, generator=generator) @ torch.randn(32, cols, generator=generator)
    noise = torch.randn(rows, cols, generator=generator)
    return update + noise * (0.05 * float(update.norm()) / float(noise.norm()))


def pair(kind: str, rows: int, cols: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, cols, generator=generator) * 0.02
    delta = (planted if kind == "planted" else heavy_tailed)(rows, cols, generator)
    tuned = base + delta * (0.03 * float(base.norm()) / float(delta.norm()))
    if kind == "heavy-tailed + row scale":
        tuned = tuned * (1 + 0.02 * torch.randn(rows, 1, generator=generator))
    return base, tuned


def best_rank(matrix: torch.Tensor, rank: int) -> torch.Tensor:
    u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
    return (u[:, :rank] * s[:rank]) @ vh[:rank]


def with_best_magnitudes(base: torch.Tensor, update: torch.Tensor, tuned: torch.Tensor) -> torch.Tensor:
    """The DoRA weight of direction `base + update` whose magnitudes are the best against `tuned` (projection)."""
    direction = base + update
    unit = direction / torch.linalg.vector_norm(direction, dim=1, keepdim=True)
    magnitudes = (unit * tuned).sum(dim=1)
    return dora_weight(base, update, magnitudes, transposed=False)


def fitted_dora(base: torch.Tensor, tuned: torch.Tensor, rank: int) -> torch.Tensor:
    scale = torch.ones(tuned.shape[0], 1)
    for _ in range(FIT_ROUNDS):
        update = best_rank(tuned * scale - base, rank)
        direction = base + update
        scale = (direction * tuned).sum(dim=1, keepdim=True) / (tuned * tuned).sum(dim=1, keepdim=True)
    return with_best_magnitudes(base, update, tuned)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="One 512×512 matrix only.")
    args = parser.parse_args()
    shapes = {"512²": (512, 512)} if args.quick else {"1024²": (1024, 1024), "2048×512": (2048, 512)}
    print(f"{'matrix':<10} {'pair':<25} {'r':>3}  {'LoRA r':>8} {'LoRA r+1':>8} {'LoRA =size':>10} "
          f"{'DoRA m':>8} {'DoRA fit':>8}  DoRA fit / LoRA =size")
    for label, (rows, cols) in shapes.items():
        for kind in ("heavy-tailed", "planted", "heavy-tailed + row scale"):
            base, tuned = pair(kind, rows, cols)
            delta = tuned - base
            norm = float(delta.norm())
            for rank in (16, 64):
                lora = float((base + best_rank(delta, rank) - tuned).norm()) / norm
                lora_next = float((base + best_rank(delta, rank + 1) - tuned).norm()) / norm
                fraction = rows / (rows + cols)
                equal_size = (lora**2 + fraction * (lora_next**2 - lora**2)) ** 0.5
                magnitudes = float((with_best_magnitudes(base, best_rank(delta, rank), tuned) - tuned).norm()) / norm
                fitted = float((fitted_dora(base, tuned, rank) - tuned).norm()) / norm
                print(f"{label:<10} {kind:<25} {rank:>3}  {lora:8.5f} {lora_next:8.5f} {equal_size:10.5f} "
                      f"{magnitudes:8.5f} {fitted:8.5f}  {fitted / equal_size:.4f}", flush=True)


if __name__ == "__main__":
    main()
