"""FP8 checkpoints: float8 (e4m3 / e5m2) weights with a scale.

Two layouts: `weight_scale` multiplies the weight per tensor (one value) or per output channel (`[out]` or
`[out, 1]`); `weight_scale_inv` (DeepSeek-V3, `weight_block_size` [128, 128] in the settings) multiplies each
128x128 block by its own value. Float8 is widened (exactly) before any arithmetic, so a device without float8
kernels (every CPU) reads it all the same. `input_scale` (for activations at inference) is left out.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from guiapp.checkpoints.quantized import compiled
from guiapp.checkpoints.quantized.layout import (
    Dequantized,
    QuantizedLayout,
    ReadStored,
    ReadStoredRows,
    Stored,
    look_up,
    refuse,
    settings_dtype,
)
from guiapp.facts.dtypes import FLOAT8_FIELDS, dtype_name

# The float8 weight formats this torch has (e4m3/e5m2 and their fnuz variants); e8m0 holds only scale exponents.
FLOAT8 = tuple(dtype for name in dir(torch) if name.startswith(("float8_e4m3", "float8_e5m2"))
               and isinstance(dtype := getattr(torch, name), torch.dtype))
SCALE_SUFFIXES = ("_scale_inv", "_scale")
ACTIVATION_SCALES = (".input_scale", ".output_scale", ".k_scale", ".v_scale")


def plan(stored: Mapping[str, Stored], settings: Mapping[str, Any], config: Mapping[str, Any], label: str,
         read: ReadStored | None) -> QuantizedLayout:
    """The layout of an FP8 checkpoint. Raises QuantizedCheckpointError naming a float8 weight without a scale,
    or a scale whose shape does not fit the weight (or the block size the settings give)."""
    block = settings.get("weight_block_size")
    dtype = settings_dtype(config)
    tensors: dict[str, Dequantized] = {}
    for name, info in stored.items():
        if info.dtype not in FLOAT8:
            continue
        scale = next((name + suffix for suffix in SCALE_SUFFIXES if name + suffix in stored), None)
        if scale is None:
            raise refuse(label, name, 'is stored in float8 but has no scale (expected a tensor '
                         f'"{name}_scale_inv" or "{name}_scale")')
        blocks = tuple(block) if scale.endswith("_scale_inv") and block else None
        tensors[name] = scaled(stored, name, scale, label, dtype, blocks)
    if not tensors:
        raise refuse(label, next(iter(stored), "(none)"), "says FP8, but no tensor is stored in float8")
    kinds = sorted({str(stored[name].dtype).removeprefix("torch.float8_") for name in tensors})
    blocked = f", {block[0]}x{block[1]} blocks" if block else ""
    hidden = {part for entry in tensors.values() for part in entry.parts}
    hidden |= {name for name in stored if name.endswith(ACTIVATION_SCALES)}
    return QuantizedLayout("fp8", f"FP8 ({', '.join(kinds)}{blocked})", tensors, frozenset(hidden))


def dequantized(codes: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
                blocks: tuple[int, ...] | None = None) -> torch.Tensor:
    """`codes` times `scale` (stretched over them as `apply_in_place` does), as values of `dtype` where float8 is
    exact in it (float16, bfloat16, float32), else float32: the same bits as converting the codes to float32,
    scaling and converting to `dtype` (one rounding: every float8 value is exact in these).

    torch converts float8 element by element (5 ns a value here), which made a merge of an FP8 model twice as slow
    as of its bf16 copy. On the CPU a matrix is dequantized by a compiled loop where there is one
    (guiapp/checkpoints/quantized/compiled.py: 0.16 ns a value); else the codes' bits are moved into bfloat16's
    places with torch (three integer passes, about 0.5 ns a value with the scaling, on one core), or, where that
    does not hold, looked up in a table of the 256 values."""
    fast = _compiled(codes, scale, dtype, blocks)
    if fast is not None:
        return fast
    shifted = _shifted(codes, scale, dtype)
    if shifted is not None:
        values, undoing_scale = shifted
        return apply_in_place(values, undoing_scale, torch.Tensor.mul_, blocks).to(dtype)
    return apply_in_place(decoded(codes, dtype), scale, torch.Tensor.mul_, blocks)


def _compiled(codes: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
              blocks: tuple[int, ...] | None) -> torch.Tensor | None:
    """The compiled loop's result for a matrix whose scales each cover a row's whole group of columns (one per
    tensor, per row, or per block), the groups equal; None otherwise (see `compiled.dequantize_float8`)."""
    if codes.dim() != 2 or scale.dim() != 2 or scale.shape[1] == 0:
        return None
    rows, columns = codes.shape
    groups = scale.shape[1]
    if columns != groups * (blocks[1] if blocks else columns // groups):
        return None  # a ragged last group
    per_row = expand(scale, (rows, groups), blocks).expand(rows, groups)
    return compiled.dequantize_float8(codes, per_row, dtype)


def _shifted(codes: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The codes as float32, 2**-offset times their values (exact, subnormals included: their bits moved into
    bfloat16's places, guiapp.facts.dtypes.FLOAT8_FIELDS), and `scale` times 2**offset, which undoes it; None for
    another format, a tensor not on the CPU or empty, a model dtype other than bfloat16 or float32, a code with no such
    bfloat16 (NaN, infinity), or a scale that 2**offset would take past float32's range."""
    fields = FLOAT8_FIELDS.get(dtype_name(codes.dtype))
    if fields is None or codes.device.type != "cpu" or (dtype != torch.bfloat16 and dtype != torch.float32) or \
            codes.numel() == 0:
        return None
    undoing_scale = scale.float() * 2.0 ** fields.offset
    if not bool(torch.isfinite(undoing_scale).all()) or \
            int((codes.view(torch.uint8) | (0xFF ^ fields.unmapped)).max()) == 0xFF:
        return None
    bits = codes.view(torch.int8).to(torch.int16)  # sign-extended: the sign fills the high byte
    bits <<= fields.shift
    bits &= (0x8000 | 0x7F << fields.shift) - 0x10000  # the sign bit and the moved fields, as an int16
    return bits.view(torch.bfloat16).float(), undoing_scale


def decoded(codes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`codes` (float8, or any other dtype) as values of `dtype` where every float8 value is exact in it (float16,
    bfloat16, float32), else as float32, so that scaling them in place rounds once. Float8 on the CPU is looked up
    in a table of its 256 values (torch converts it element by element, 2.5 times slower)."""
    if codes.dtype not in FLOAT8 or codes.device.type != "cpu":
        return codes.float()
    exact_in = dtype if dtype.is_floating_point and dtype.itemsize == 2 else torch.float32  # fp16, bf16
    return look_up(_float8_values(codes.dtype, exact_in), codes.contiguous().view(torch.uint8)).reshape(codes.shape)


@functools.cache
def _float8_values(dtype: torch.dtype, exact_in: torch.dtype) -> torch.Tensor:
    return torch.arange(256, dtype=torch.uint8).view(dtype).to(exact_in)


def scaled(stored: Mapping[str, Stored], weight: str, scale: str, label: str, dtype: torch.dtype,
           blocks: tuple[int, ...] | None = None) -> Dequantized:
    """A weight times its scale (one value, one per row, or one per block; `blocks` fixes the block size).
    Raises QuantizedCheckpointError when the scale's shape does not tile the weight's."""
    shape, scale_shape = tuple(stored[weight].shape), tuple(stored[scale].shape)
    if math.prod(scale_shape) == 1:
        scale_shape = (1,) * len(shape)
    elif len(scale_shape) == len(shape) - 1:
        scale_shape = scale_shape + (1,)
    wanted = tuple(-(-size // size_block) for size, size_block in zip(shape, blocks, strict=False)) if blocks else None
    if len(scale_shape) != len(shape) or (wanted is not None and scale_shape != wanted) or \
            any(s != 1 and -(-size // -(-size // s)) != s for size, s in zip(shape, scale_shape, strict=True)):
        need = f" where blocks of {'x'.join(map(str, blocks))} need {list(wanted)}" if wanted else ""
        raise refuse(label, weight, f'has "{scale}" of shape {list(stored[scale].shape)}, which does not tile its '
                     f"shape {list(shape)}{need}")

    def rebuild(tensors: list[torch.Tensor]) -> torch.Tensor:
        return dequantized(tensors[0], tensors[1].float().reshape(scale_shape), dtype, blocks)

    def rows(read: ReadStored, read_rows: ReadStoredRows, wanted: range) -> torch.Tensor:
        """Rows of a matrix: their codes, and the scales of their rows (or row blocks) alone."""
        codes = read_rows(weight, wanted)
        if scale_shape[0] == 1 or not wanted:
            return dequantized(codes, read(scale).float().reshape(scale_shape), dtype, blocks)
        block = blocks[0] if blocks else -(-shape[0] // scale_shape[0])
        first = wanted.start // block
        stored = read_rows(scale, range(first, (wanted.stop - 1) // block + 1)).float().reshape(-1, scale_shape[1])
        per_row = stored[torch.arange(wanted.start, wanted.stop) // block - first]
        return dequantized(codes, per_row, dtype, (1, blocks[1]) if blocks else None)

    return Dequantized(shape, dtype, (weight, scale), rebuild, rows if len(shape) == 2 else None)


def expand(scale: torch.Tensor, shape: tuple[int, ...], blocks: tuple[int, ...] | None = None) -> torch.Tensor:
    """`scale` (one value per block along each dimension, or 1 to broadcast) stretched to `shape`; the blocks are
    `blocks` in size (the last one ragged), or equal parts when not given."""
    for dim, (size, count) in enumerate(zip(shape, scale.shape, strict=True)):
        if count not in (1, size):
            block = blocks[dim] if blocks else -(-size // count)
            scale = scale.repeat_interleave(block, dim=dim).narrow(dim, 0, size)
    return scale


def apply_in_place(weight: torch.Tensor, scale: torch.Tensor, operation: Callable[[torch.Tensor, torch.Tensor], Any],
                   blocks: tuple[int, ...] | None = None) -> torch.Tensor:
    """`operation` (torch.Tensor.mul_, sub_) of `weight` by `scale` stretched over it as `expand` does, in place:
    the leading dimensions' scales are stretched (they are small), the last one is applied by viewing the weight
    as groups when they divide it, so no weight-sized scale is made. Returns `weight`."""
    shape = tuple(weight.shape)
    scale = expand(scale, shape[:-1] + scale.shape[-1:], blocks)
    size, count = shape[-1], scale.shape[-1]
    block = blocks[-1] if blocks else -(-size // count)
    if count in (1, size) or size != count * block:
        operation(weight, expand(scale, shape, blocks))
    else:
        operation(weight.view(*shape[:-1], count, block), scale.unsqueeze(-1))
    return weight
