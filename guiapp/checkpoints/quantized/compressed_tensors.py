"""compressed-tensors checkpoints (llm-compressor's output), in their three weight formats.

pack-quantized: `weight_packed` int32 [out, ceil(in * bits / 32)] holds signed integers plus 2^(bits-1), densely,
the first in the lowest bits; `weight_shape` the real shape; `weight_scale` one value per tensor, row or group of
columns; asymmetric schemes add `weight_zero_point`, packed the same way along the rows.
int-quantized / naive-quantized: an int8 `weight` with `weight_scale` (and `weight_zero_point`).
float-quantized: a float8 `weight` with `weight_scale` (as FP8's per-tensor / per-channel / per-group scales).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from guiapp.checkpoints.quantized.fp8 import FLOAT8, apply_in_place, scaled
from guiapp.checkpoints.quantized.gptq import unpack
from guiapp.checkpoints.quantized.layout import (
    Dequantized,
    QuantizedLayout,
    ReadStored,
    Stored,
    need,
    refuse,
    settings_dtype,
)

PACKED = ".weight_packed"
READ_FORMATS = ("pack-quantized", "int-quantized", "naive-quantized", "float-quantized")


def plan(stored: Mapping[str, Stored], settings: Mapping[str, Any], config: Mapping[str, Any], label: str,
         read: ReadStored | None) -> QuantizedLayout:
    """The layout of a compressed-tensors checkpoint. Raises UnknownQuantizationError-like refusals (as
    QuantizedCheckpointError) for a format Mergesmith does not read, and names the tensor whose parts are missing
    or do not fit."""
    form = str(settings.get("format", "pack-quantized")).lower()
    if form not in READ_FORMATS:
        raise refuse(label, "quantization_config", f'uses the compressed-tensors format "{form}"; Mergesmith reads '
                     f"{', '.join(READ_FORMATS)}")
    bits = {int(group["weights"]["num_bits"]) for group in (settings.get("config_groups") or {}).values()
            if isinstance(group, Mapping) and isinstance(group.get("weights"), Mapping)} or {4}
    dtype = settings_dtype(config)
    tensors: dict[str, Dequantized] = {}
    for name, info in stored.items():
        if name.endswith(PACKED):
            module = name.removesuffix(PACKED)
            need(stored, f"{module}.weight_scale", label, name, "weight_scale")
            tensors[f"{module}.weight"] = _packed(stored, module, bits, label, dtype, read)
        elif name.endswith(".weight") and f"{name}_scale" in stored and info.dtype in FLOAT8:
            tensors[name] = scaled(stored, name, f"{name}_scale", label, dtype)
        elif name.endswith(".weight") and f"{name}_scale" in stored and info.dtype == torch.int8:
            tensors[name] = _integers(stored, name, label, dtype)
    if not tensors:
        raise refuse(label, next(iter(stored), "(none)"), "says compressed-tensors, but no tensor is packed or scaled")
    hidden = {part for entry in tensors.values() for part in entry.parts}
    hidden |= {n for n in stored if n.endswith((".input_scale", ".input_zero_point", ".weight_g_idx"))}
    kinds = "/".join(f"{b}-bit" for b in sorted(bits)) if form != "float-quantized" else "FP8"
    return QuantizedLayout("compressed-tensors", f"{kinds} compressed-tensors ({form})", tensors, frozenset(hidden))


def _packed(stored: Mapping[str, Stored], module: str, bits: set[int], label: str, dtype: torch.dtype,
            read: ReadStored | None) -> Dequantized:
    """One pack-quantized weight, its shape read from `weight_shape` (or, headers only, inferred)."""
    packed, name = stored[module + PACKED], module + PACKED
    if packed.dtype != torch.int32 or len(packed.shape) != 2:
        raise refuse(label, name, "is not a 2-D int32 tensor")
    rows, words = packed.shape
    shape_name = f"{module}.weight_shape"
    if read is not None:
        need(stored, shape_name, label, name, "weight_shape")
        shape = tuple(int(d) for d in read(shape_name).reshape(-1).tolist())
    else:
        shape = (rows, words * 32 // min(bits))
    width = next((b for b in sorted(bits) if len(shape) == 2 and shape[0] == rows and -(-shape[1] * b // 32) == words
                  and 32 % b == 0), None)
    if width is None:
        raise refuse(label, name, f"holds {rows} x {words} int32 words, which do not fit its weight_shape "
                     f"{list(shape)} at {'/'.join(map(str, sorted(bits)))} bits per value")
    scale_shape = tuple(stored[f"{module}.weight_scale"].shape)
    zero = f"{module}.weight_zero_point"
    parts = (name, f"{module}.weight_scale") + ((zero,) if zero in stored else ())
    for part in parts[1:]:
        if not _tiles(tuple(stored[part].shape), shape, width if stored[part].dtype == torch.int32 else None):
            raise refuse(label, name, f'has "{part}" of shape {list(stored[part].shape)}, which does not tile its '
                         f"weight_shape {list(shape)}")
    offset = 1 << (width - 1)

    def rebuild(t: list[torch.Tensor]) -> torch.Tensor:
        values = (unpack(t[0], width, 1)[:, : shape[1]] - offset).float()
        if len(t) > 2:
            zeros = t[2] if t[2].dtype != torch.int32 else unpack(t[2], width, 0)[: scale_shape[0]] - offset
            apply_in_place(values, zeros.float().reshape(_matrix(scale_shape)), torch.Tensor.sub_)
        return apply_in_place(values, t[1].float().reshape(_matrix(scale_shape)), torch.Tensor.mul_)

    return Dequantized(shape, dtype, parts, rebuild)


def _tiles(scale: tuple[int, ...], shape: tuple[int, ...], packed_bits: int | None) -> bool:
    """Whether a scale (or zero point, packed along its rows when `packed_bits`) of shape `scale` has one value
    per tensor, per row, or per equal group of columns of a weight of `shape`."""
    rows, groups = _matrix(scale)
    if packed_bits is not None and scale and len(scale) == 2:
        rows = shape[0] if -(-shape[0] * packed_bits // 32) == scale[0] else -1
    return rows in (1, shape[0]) and 0 < groups <= shape[1] and -(-shape[1] // -(-shape[1] // groups)) == groups


def _matrix(shape: tuple[int, ...]) -> tuple[int, int]:
    """A scale's shape as [rows, groups]: one value becomes [1, 1], one per row [rows, 1]."""
    return (1, 1) if len(shape) == 0 or shape == (1,) else (shape[0], shape[1] if len(shape) > 1 else 1)


def _integers(stored: Mapping[str, Stored], weight: str, label: str, dtype: torch.dtype) -> Dequantized:
    """An int8 weight with its scale (and zero point): (weight - zero) * scale."""
    base = scaled(stored, weight, f"{weight}_scale", label, dtype)
    zero = f"{weight}_zero_point"
    if zero not in stored:
        return base
    shape, scale_shape = base.shape, tuple(stored[f"{weight}_scale"].shape)

    def rebuild(t: list[torch.Tensor]) -> torch.Tensor:
        values = apply_in_place(t[0].float(), t[2].float().reshape(_matrix(scale_shape)), torch.Tensor.sub_)
        return apply_in_place(values, t[1].float().reshape(_matrix(scale_shape)), torch.Tensor.mul_)

    return Dequantized(shape, dtype, base.parts + (zero,), rebuild)
