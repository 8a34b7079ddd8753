"""DoRA (Liu et al. 2024, PEFT's `use_dora`): a LoRA update whose result is renormalised by a learned magnitude.

PEFT stores one `lora_magnitude_vector` per adapted module, next to its lora_A / lora_B factors. Applied, the
weight becomes `m · (W + ΔW) / ‖W + ΔW‖`, the norm taken per output feature: over each row of a Linear weight
(out × in; every dimension but the first for a convolution), over each column where the stored weight is the
transpose of the layer's (fan_in_fan_out Conv1D layers and embeddings, whose columns are PEFT's "rows"). PEFT's
`merge_and_unload` does exactly this (peft/tuners/lora/variants.py, DoraLinearVariant / DoraEmbeddingVariant).
Everything here is computed in float32, so a half-precision base or adapter never meets a half-precision kernel.
"""

from __future__ import annotations

import torch

MAGNITUDE = "lora_magnitude_vector"


def dora_weight(base: torch.Tensor, delta: torch.Tensor, magnitude: torch.Tensor, transposed: bool) -> torch.Tensor:
    """The float32 weight a DoRA module gives: `magnitude` times `base + delta` with each output feature's norm
    divided out. `transposed` says the output features are the columns (see the module docstring).

    `base` and `delta` have the same shape; `magnitude` has one entry per output feature. A feature whose norm is
    zero gives NaN (as it does in PEFT); the caller's finiteness check names the tensor.
    """
    weight = base.to(torch.float32) + delta.to(torch.float32)
    rows = weight.T if transposed else weight.reshape(weight.shape[0], -1)
    factor = magnitude.to(weight.device, torch.float32) / torch.linalg.vector_norm(rows, dim=1)
    scaled = rows * factor.unsqueeze(1)
    return (scaled.T if transposed else scaled).reshape(weight.shape)


def output_features(shape: tuple[int, ...], transposed: bool) -> int:
    """How many entries a module's magnitude vector holds for a weight of `shape` (see `dora_weight`)."""
    return int(shape[1] if transposed else shape[0])
