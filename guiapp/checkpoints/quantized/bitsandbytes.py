"""bitsandbytes checkpoints as `save_pretrained` writes them.

4-bit (nf4 / fp4): the weight is a uint8 tensor of packed 4-bit codes (two per byte, the first in the high
nibble), with `.absmax` (one scale per block of `blocksize` values), `.quant_map` (the 16 values a code stands
for) and `.quant_state.bitsandbytes__nf4|fp4` (a JSON object stored as uint8: shape, dtype, blocksize...). With
double quantisation the absmax itself is 8-bit, blockwise, with `.nested_absmax`, `.nested_quant_map` and an
offset. 8-bit (LLM.int8): an int8 weight with `.SCB`, one absmax per output row: weight = int8 * SCB / 127.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

import torch

from guiapp.checkpoints.quantized import compiled
from guiapp.checkpoints.quantized.layout import (
    Dequantized,
    QuantizedLayout,
    ReadStored,
    ReadStoredRows,
    Stored,
    expect_shape,
    look_up,
    need,
    refuse,
    settings_dtype,
)

STATE = ".quant_state.bitsandbytes__"
SETTINGS_BYTES = 1 << 16  # a quant_state is a few hundred bytes of JSON


def plan(stored: Mapping[str, Stored], settings: Mapping[str, Any], config: Mapping[str, Any], label: str,
         read: ReadStored | None) -> QuantizedLayout:
    """The layout of a bitsandbytes checkpoint. Raises QuantizedCheckpointError naming the tensor whose parts are
    missing or do not fit, or when the quant_state of a 4-bit weight cannot be read (no `read`: headers only)."""
    tensors: dict[str, Dequantized] = {}
    hidden: set[str] = set()
    kinds: set[str] = set()
    for name in stored:
        if STATE in name:
            weight = name.split(STATE)[0]
            tensors[weight], parts = _four_bit(stored, weight, name, label, read)
            hidden.update(parts)
            nested = f"{weight}.nested_absmax" in parts
            kinds.add(f"4-bit ({name.split(STATE)[1]}{', double quantized' if nested else ''})")
        elif name.endswith(".SCB"):  # LLM.int8 keeps its row scales beside the weight: module.SCB
            module = name.removesuffix(".SCB")
            tensors[f"{module}.weight"] = _eight_bit(stored, module, label, settings_dtype(config, torch.float16))
            hidden.update((f"{module}.weight", name, f"{module}.weight_format"))
            kinds.add("8-bit (LLM.int8)")
    orphans = [n for n in stored if n.endswith((".absmax", ".quant_map")) and n.rsplit(".", 1)[0] not in tensors]
    if orphans:
        raise refuse(label, orphans[0].rsplit(".", 1)[0], f"has {orphans[0].rsplit('.', 1)[1]} but no quant_state "
                     f'(expected a tensor named like "{orphans[0].rsplit(".", 1)[0]}{STATE}nf4")')
    if not tensors:
        raise refuse(label, next(iter(stored), "(none)"), "says bitsandbytes, but no tensor carries its "
                     "quant_state or SCB")
    return QuantizedLayout("bitsandbytes", " and ".join(sorted(kinds)), tensors,
                           frozenset(hidden & set(stored)))


def _four_bit(stored: Mapping[str, Stored], weight: str, state_name: str, label: str,
              read: ReadStored | None) -> tuple[Dequantized, tuple[str, ...]]:
    """One 4-bit weight: its settings read from the quant_state tensor and checked against its parts."""
    if read is None:
        raise refuse(label, weight, "keeps its real shape in its quant_state tensor, which is read from the "
                     "downloaded files (download the model first: `mergesmith hub download`)")
    packed = need(stored, weight, label, weight, "packed data")
    state = _read_state(read(state_name), label, weight)
    shape, blocksize = tuple(int(d) for d in state["shape"]), int(state["blocksize"])
    count = math.prod(shape)
    if packed.dtype != torch.uint8 or math.prod(packed.shape) != (count + 1) // 2:
        raise refuse(label, weight, f"holds {math.prod(packed.shape):,} packed {packed.dtype} values, which do not "
                     f"fit its shape {list(shape)} at two 4-bit codes per byte")
    blocks = -(-count // blocksize)
    absmax = need(stored, f"{weight}.absmax", label, weight, "absmax (block scales)")
    expect_shape(absmax, (blocks,), label, weight, f"{weight}.absmax")
    expect_shape(need(stored, f"{weight}.quant_map", label, weight, "quant_map (code book)"), (16,), label,
                 weight, f"{weight}.quant_map")
    parts: tuple[str, ...] = (weight, f"{weight}.absmax", f"{weight}.quant_map")
    nested = "nested_blocksize" in state
    if nested:
        nested_blocks = -(-blocks // int(state["nested_blocksize"]))
        expect_shape(need(stored, f"{weight}.nested_absmax", label, weight, "nested_absmax"), (nested_blocks,),
                     label, weight, f"{weight}.nested_absmax")
        expect_shape(need(stored, f"{weight}.nested_quant_map", label, weight, "nested_quant_map"), (256,), label,
                     weight, f"{weight}.nested_quant_map")
        parts += (f"{weight}.nested_absmax", f"{weight}.nested_quant_map")
    dtype = getattr(torch, str(state.get("dtype", "bfloat16")), torch.bfloat16)
    offset, nested_size = float(state.get("nested_offset", 0.0)), int(state.get("nested_blocksize", 0))

    def rebuild(tensors: list[torch.Tensor]) -> torch.Tensor:
        absmax = tensors[1].float()
        if nested:
            absmax = dequantize_blockwise(tensors[1], tensors[4], tensors[3], nested_size) + offset
        return _four_bit_values(tensors[0], absmax, tensors[2], count, blocksize, dtype)

    # The code books of a weight read in blocks of rows, read once: a merge reads each weight a block at a time,
    # and reading and preparing them again took a fifth of the time of dequantizing a block of a million values.
    books: dict[str, torch.Tensor | None] = {}

    def rows(read: ReadStored, read_rows: ReadStoredRows, wanted: range) -> torch.Tensor:
        """Rows of a matrix whose rows hold whole blocks: their bytes and their blocks' absmax alone."""
        if not books:
            books.update(codes=_shared_book(read(parts[2]), pairs=False),
                         nested=_shared_book(read(parts[4]), pairs=False) if nested else None)
        begin, end = wanted.start * shape[1] // blocksize, wanted.stop * shape[1] // blocksize
        packed = read_rows(weight, range(wanted.start * shape[1] // 2, wanted.stop * shape[1] // 2))
        absmax = read_rows(parts[1], range(begin, end))
        if nested and end > begin:
            first = begin // nested_size
            scales = read_rows(parts[3], range(first, (end - 1) // nested_size + 1))
            absmax = dequantize_blockwise(absmax, books["nested"], scales, nested_size, begin - first * nested_size)
            absmax += offset
        return _four_bit_values(packed, absmax, books["codes"], (end - begin) * blocksize, blocksize, dtype)

    whole_blocks = len(shape) == 2 and shape[1] % blocksize == 0 and blocksize % 2 == 0
    return Dequantized(shape, dtype, parts, rebuild, rows if whole_blocks else None), parts + (state_name,)


def _read_state(raw: torch.Tensor, label: str, weight: str) -> dict[str, Any]:
    """The JSON settings a quant_state tensor holds. Raises QuantizedCheckpointError when they are not JSON or
    lack the shape or blocksize."""
    if raw.dtype != torch.uint8 or raw.numel() > SETTINGS_BYTES:
        raise refuse(label, weight, "has a quant_state that is not a small uint8 tensor of JSON")
    try:
        state = json.loads(bytes(raw.numpy()).decode("utf-8"))
        shape = [int(d) for d in state["shape"]]
        if int(state["blocksize"]) <= 0 or any(d < 0 for d in shape) or \
                ("nested_blocksize" in state and int(state["nested_blocksize"]) <= 0):
            raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise refuse(label, weight, "has a quant_state without a readable shape and blocksize") from None
    return state


def dequantize_blockwise(codes: torch.Tensor, code_book: torch.Tensor, absmax: torch.Tensor, blocksize: int,
                         start: int = 0) -> torch.Tensor:
    """8-bit blockwise values: code_book[code] times the absmax of the code's block, in float32; the first code is
    the `start`-th of its block (codes of some rows begin inside a block)."""
    values = look_up(code_book.float(), codes)
    scales = absmax.float().repeat_interleave(blocksize)[start : start + values.numel()]
    return values.mul_(scales).reshape(codes.shape)


def _shared_book(code_book: torch.Tensor, pairs: bool) -> torch.Tensor:
    """`value_pairs(code_book)` (`pairs`), or `code_book` in float32, shared by every weight with the same code book.
    Kept per weight, each small table stayed where it was made, among the blocks a merge frees, and kept the C
    heap from shrinking (40-60 MB more private memory in a 1 GB 4-bit merge); a model's weights share a few."""
    return _book_of(code_book.float().numpy().tobytes(), pairs)


@functools.lru_cache(maxsize=64)
def _book_of(values: bytes, pairs: bool) -> torch.Tensor:
    book = torch.frombuffer(bytearray(values), dtype=torch.float32)
    return value_pairs(book) if pairs else book


def value_pairs(code_book: torch.Tensor) -> torch.Tensor:
    """The (256, 2) float32 table of the two values each byte of packed 4-bit codes stands for (high nibble first)."""
    byte = torch.arange(256)
    return torch.stack((code_book.float()[byte >> 4], code_book.float()[byte & 0x0F]), dim=1)


def _four_bit_values(packed: torch.Tensor, absmax: torch.Tensor, code_book: torch.Tensor, count: int,
                     blocksize: int, dtype: torch.dtype) -> torch.Tensor:
    """`count` values from packed 4-bit codes: as `dtype` from the loop compiled for this CPU where it runs
    (guiapp/checkpoints/quantized/compiled.py), else in float32 from torch's `dequantize_4bit`."""
    fast = compiled.dequantize_four_bit(packed, absmax, code_book, blocksize, dtype)
    if fast is not None:
        return fast
    return dequantize_4bit(packed, absmax.float(), _shared_book(code_book, pairs=True), count, blocksize)


def dequantize_4bit(packed: torch.Tensor, absmax: torch.Tensor, pairs: torch.Tensor, count: int,
                    blocksize: int) -> torch.Tensor:
    """`count` values from packed 4-bit codes with one absmax per block, in float32: one lookup per byte in `pairs`
    (`value_pairs` of the code book), then each block scaled in place."""
    values = look_up(pairs, packed)
    blocks = -(-count // blocksize)
    if values.numel() != blocks * blocksize:
        values = torch.nn.functional.pad(values[:count], (0, blocks * blocksize - count))
    return values.view(blocks, blocksize).mul_(absmax.float().reshape(blocks, 1)).reshape(-1)[:count]


def _eight_bit(stored: Mapping[str, Stored], module: str, label: str, dtype: torch.dtype) -> Dequantized:
    """The LLM.int8 weight of `module`: int8 rows scaled by SCB / 127."""
    weight = f"{module}.weight"
    info = need(stored, weight, label, f"{module}.SCB", "int8 weight")
    if info.dtype != torch.int8 or len(info.shape) != 2:
        raise refuse(label, weight, f"has SCB scales but is {info.dtype} of shape {list(info.shape)}, not a "
                     "2-D int8 matrix")
    expect_shape(stored[f"{module}.SCB"], (info.shape[0],), label, weight, f"{module}.SCB")

    def rebuild(tensors: list[torch.Tensor]) -> torch.Tensor:
        return tensors[0].float() * (tensors[1].float() / 127.0).unsqueeze(1)

    def rows(read: ReadStored, read_rows: ReadStoredRows, wanted: range) -> torch.Tensor:
        return rebuild([read_rows(weight, wanted), read_rows(f"{module}.SCB", wanted)])

    return Dequantized(tuple(info.shape), dtype, (weight, f"{module}.SCB"), rebuild, rows)
