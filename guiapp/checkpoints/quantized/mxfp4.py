"""MXFP4 checkpoints as gpt-oss ships them: `<name>_blocks` uint8 [..., rows, groups, 16] holds 32 FP4 (e2m1)
codes per group, two per byte (the first in the low nibble), and `<name>_scales` uint8 [..., rows, groups] one
power-of-two exponent per group (biased by 127). The weight `<name>` is rebuilt as transformers does for gpt-oss:
[..., rows, groups * 32], then its last two dimensions swapped (the layout of the unquantized checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from guiapp.checkpoints.quantized.layout import (
    Dequantized,
    QuantizedLayout,
    ReadStored,
    Stored,
    expect_shape,
    need,
    refuse,
    settings_dtype,
)

FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
BLOCK_BYTES = 16  # 32 four-bit codes per scale


def plan(stored: Mapping[str, Stored], settings: Mapping[str, Any], config: Mapping[str, Any], label: str,
         read: ReadStored | None) -> QuantizedLayout:
    """The layout of an MXFP4 checkpoint. Raises QuantizedCheckpointError naming a `_blocks` tensor without its
    `_scales`, or whose shapes do not fit together."""
    tensors: dict[str, Dequantized] = {}
    for name, info in stored.items():
        if not name.endswith("_blocks"):
            continue
        weight = name.removesuffix("_blocks")
        if info.dtype != torch.uint8 or len(info.shape) < 3 or info.shape[-1] != BLOCK_BYTES:
            raise refuse(label, name, f"is {info.dtype} of shape {list(info.shape)}, not uint8 blocks of "
                         f"{BLOCK_BYTES} bytes")
        scales = need(stored, f"{weight}_scales", label, name, "scales")
        expect_shape(scales, tuple(info.shape[:-1]), label, name, f"{weight}_scales")
        *prefix, rows, groups, _ = info.shape
        shape = (*prefix, groups * 2 * BLOCK_BYTES, rows)
        tensors[weight] = Dequantized(tuple(shape), settings_dtype(config), (name, f"{weight}_scales"), dequantize)
    if not tensors:
        raise refuse(label, next(iter(stored), "(none)"), "says MXFP4, but no tensor ends in _blocks")
    hidden = frozenset(part for entry in tensors.values() for part in entry.parts)
    return QuantizedLayout("mxfp4", "MXFP4 (4-bit float, groups of 32)", tensors, hidden)


def dequantize(tensors: list[torch.Tensor]) -> torch.Tensor:
    """FP4 codes times 2^(scale - 127), as float32 [..., rows, groups * 32] with its last two dimensions swapped."""
    blocks, scales = tensors
    values = torch.tensor(FP4_VALUES, dtype=torch.float32)
    codes = torch.stack((blocks & 0x0F, blocks >> 4), dim=-1).flatten(-2).long()
    weight = torch.ldexp(values[codes], (scales.to(torch.int32) - 127).unsqueeze(-1).float())
    return weight.flatten(-2).transpose(-1, -2)
