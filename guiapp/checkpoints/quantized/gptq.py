"""GPTQ and AWQ checkpoints: integers packed into int32, with per-group scales and zero points.

GPTQ (AutoGPTQ / GPTQModel, `checkpoint_format` "gptq"): `qweight` [in * bits / 32, out] packs consecutive input
rows into one int32 (the first in the lowest bits), `qzeros` [groups, out * bits / 32] packs zero points along the
output columns the same way and stores them minus one (the v1 format; "gptq_v2" stores them as they are),
`scales` [groups, out], and `g_idx` [in] gives each input row's group (act-order models shuffle it).
AWQ (AutoAWQ GEMM): `qweight` [in, out * bits / 32] packs output columns in the order 0 2 4 6 1 3 5 7,
`qzeros` [groups, out * bits / 32] likewise, `scales` [groups, out]; the group of input row i is i // group_size.
Both rebuild weight[out, in] = ((q - zero) * scale) transposed.
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

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of an AWQ int32 holds column AWQ_ORDER[i] of its eight


def unpack(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """The `bits`-bit unsigned integers packed into int32 `packed` along `dim` (lowest bits first), as int32."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    shape = [1] * (packed.dim() + 1)
    shape[dim + 1] = -1
    values = (packed.unsqueeze(dim + 1) >> shifts.view(shape)) & ((1 << bits) - 1)
    return values.flatten(dim, dim + 1)


def _settings(settings: Mapping[str, Any], label: str, bits_keys: tuple[str, ...],
              group_keys: tuple[str, ...]) -> tuple[int, int]:
    bits = next((settings[k] for k in bits_keys if k in settings), 4)
    group = next((settings[k] for k in group_keys if k in settings), 128)
    if not isinstance(bits, int) or bits not in (2, 4, 8) or not isinstance(group, int) or group == 0 or group < -1:
        raise refuse(label, "quantization_config", f"asks for {bits}-bit groups of {group}; Mergesmith reads 2-, 4- "
                     "and 8-bit weights in groups of a positive size (or -1 for one group)")
    return bits, group


def _packed_weights(stored: Mapping[str, Stored], label: str) -> list[str]:
    modules = [name.removesuffix(".qweight") for name in stored if name.endswith(".qweight")]
    if not modules:
        raise refuse(label, next(iter(stored), "(none)"), "says GPTQ/AWQ, but no tensor is a qweight")
    return modules


def plan_gptq(stored: Mapping[str, Stored], settings: Mapping[str, Any], config: Mapping[str, Any], label: str,
              read: ReadStored | None) -> QuantizedLayout:
    """The layout of a GPTQ checkpoint. Raises QuantizedCheckpointError naming a module whose qzeros, scales or
    g_idx are missing or do not fit its qweight."""
    bits, group = _settings(settings, label, ("bits",), ("group_size",))
    zero_offset = 0 if str(settings.get("checkpoint_format", "gptq")).lower() == "gptq_v2" else 1
    tensors, hidden = {}, set()
    for module in _packed_weights(stored, label):
        qweight = stored[f"{module}.qweight"]
        if qweight.dtype != torch.int32 or len(qweight.shape) != 2:
            raise refuse(label, f"{module}.qweight", "is not a 2-D int32 tensor")
        rows, out = qweight.shape[0] * 32 // bits, qweight.shape[1]
        groups = 1 if group == -1 else -(-rows // group)
        parts = (f"{module}.qweight", f"{module}.qzeros", f"{module}.scales")
        expect_shape(need(stored, parts[1], label, module, "qzeros (zero points)"), (groups, out * bits // 32),
                     label, module, parts[1])
        expect_shape(need(stored, parts[2], label, module, "scales"), (groups, out), label, module, parts[2])
        if f"{module}.g_idx" in stored:
            expect_shape(stored[f"{module}.g_idx"], (rows,), label, module, f"{module}.g_idx")
            parts += (f"{module}.g_idx",)
            index = read(parts[3]) if read is not None else torch.zeros(0, dtype=torch.int32)
            if index.numel() and (index.min() < 0 or index.max() >= groups):
                raise refuse(label, module, f"has a g_idx naming groups outside 0 to {groups - 1}")

        def rebuild(t: list[torch.Tensor], rows: int = rows) -> torch.Tensor:
            index = t[3].long() if len(t) > 3 else torch.arange(rows) // (rows if group == -1 else group)
            q = unpack(t[0], bits, 0)
            zeros = unpack(t[1], bits, 1) + zero_offset
            return ((q - zeros[index]).float() * t[2].float()[index]).T

        tensors[f"{module}.weight"] = Dequantized((out, rows), settings_dtype(config, torch.float16), parts, rebuild)
        hidden.update(parts)
    return QuantizedLayout("gptq", f"{bits}-bit GPTQ (groups of {group})", tensors, frozenset(hidden))


def plan_awq(stored: Mapping[str, Stored], settings: Mapping[str, Any], config: Mapping[str, Any], label: str,
             read: ReadStored | None) -> QuantizedLayout:
    """The layout of an AutoAWQ (GEMM) checkpoint. Raises QuantizedCheckpointError for another AWQ version or a
    module whose qzeros or scales are missing or do not fit its qweight."""
    bits, group = _settings(settings, label, ("bits", "w_bit"), ("group_size", "q_group_size"))
    version = str(settings.get("version", "gemm")).lower()
    if version != "gemm" or bits != 4:
        raise refuse(label, "quantization_config", f'is AWQ version "{version}" at {bits} bits; Mergesmith reads '
                     "4-bit GEMM, the layout AutoAWQ writes by default")
    order = torch.tensor(AWQ_ORDER).argsort()
    tensors, hidden = {}, set()
    for module in _packed_weights(stored, label):
        qweight = stored[f"{module}.qweight"]
        if qweight.dtype != torch.int32 or len(qweight.shape) != 2:
            raise refuse(label, f"{module}.qweight", "is not a 2-D int32 tensor")
        rows, out = qweight.shape[0], qweight.shape[1] * 32 // bits
        groups = 1 if group == -1 else -(-rows // group)
        parts = (f"{module}.qweight", f"{module}.qzeros", f"{module}.scales")
        expect_shape(need(stored, parts[1], label, module, "qzeros (zero points)"), (groups, qweight.shape[1]),
                     label, module, parts[1])
        expect_shape(need(stored, parts[2], label, module, "scales"), (groups, out), label, module, parts[2])

        def rebuild(t: list[torch.Tensor], rows: int = rows) -> torch.Tensor:
            columns = (torch.arange(t[2].shape[1]).view(-1, 8)[:, order]).reshape(-1)
            q = unpack(t[0], bits, 1)[:, columns]
            zeros = unpack(t[1], bits, 1)[:, columns]
            index = torch.arange(rows) // (rows if group == -1 else group)
            return ((q - zeros[index]).float() * t[2].float()[index]).T

        tensors[f"{module}.weight"] = Dequantized((out, rows), settings_dtype(config, torch.float16), parts, rebuild)
        hidden.update(parts)
    return QuantizedLayout("awq", f"{bits}-bit AWQ (groups of {group})", tensors, frozenset(hidden))
