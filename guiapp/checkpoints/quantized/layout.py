"""The shapes every quantized format shares: the stored tensors a format reads, the dequantized tensors it yields,
its layout, and the helpers formats use to refuse a model whose parts disagree with its settings."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from guiapp.errors import QuantizedCheckpointError
from guiapp.system.units import format_bytes


class Stored(Protocol):
    """What a header says about a stored tensor (the engine's TensorInfo has these)."""

    shape: tuple[int, ...]
    dtype: torch.dtype


ReadStored = Callable[[str], torch.Tensor]
ReadStoredRows = Callable[[str, range], torch.Tensor]
# The rows of a weight rebuilt from only the stored rows they are made of: (read_stored, read_stored_rows, rows).
RowsRebuild = Callable[[ReadStored, ReadStoredRows, range], torch.Tensor]


@dataclass(frozen=True)
class Dequantized:
    """One logical weight: its real shape and dtype, the stored tensors it is made from (the packed one first),
    and the function that rebuilds it from those tensors (read in `parts` order); `rows`, where the layout allows,
    rebuilds some of its rows from the stored rows they come from alone."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    parts: tuple[str, ...]
    rebuild: Callable[[list[torch.Tensor]], torch.Tensor]
    rows: RowsRebuild | None = None


@dataclass(frozen=True)
class QuantizedLayout:
    """How a quantized model's stored tensors become its weights.

    `tensors` are the weights to dequantize; `hidden` every stored name that is not itself a weight of the model
    (packed data and side tensors). `description` is what the user reads ("4-bit (nf4)").
    """

    method: str
    description: str
    tensors: dict[str, Dequantized]
    hidden: frozenset[str]
    # The weight last dequantized whole for row reads (name, tensor): a merge reads a tensor a block of rows at a
    # time; a weight whose rows cannot be rebuilt alone (transposed packings) is dequantized once per run of reads.
    _last: list[tuple[str, torch.Tensor]] = field(default_factory=list, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def read(self, name: str, read_stored: ReadStored) -> torch.Tensor:
        """The weight `name` dequantized, on the CPU. Raises CheckpointError as `read_stored` does."""
        entry = self.tensors[name]
        weight = entry.rebuild([read_stored(part) for part in entry.parts])
        return weight.reshape(entry.shape).to(entry.dtype)

    def read_rows(self, name: str, rows: range, read_stored: ReadStored, read_stored_rows: ReadStoredRows) -> torch.Tensor:
        """The rows `rows` of the weight `name` dequantized (a copy). Raises CheckpointError as the readers do."""
        entry = self.tensors[name]
        if entry.rows is not None:
            return entry.rows(read_stored, read_stored_rows, rows).reshape(len(rows), *entry.shape[1:]).to(entry.dtype)
        with self._lock:
            if not self._last or self._last[0][0] != name:
                self._last[:] = [(name, self.read(name, read_stored))]
            return self._last[0][1][rows.start : rows.stop].clone()

    def logical(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """The model's tensors as a job sees them: `stored` (TensorInfo records) without the hidden ones, each
        dequantized weight in its packed data's place, with its real shape and dtype (and no data offsets)."""
        placed = {entry.parts[0]: name for name, entry in self.tensors.items()}
        view = {}
        for name, info in stored.items():
            if name in placed:
                entry = self.tensors[placed[name]]
                view[placed[name]] = replace(info, name=placed[name], shape=entry.shape, dtype=entry.dtype,
                                             data_offsets=None)
            elif name not in self.hidden:
                view[name] = info
        return view

    def facts(self, stored: Mapping[str, Stored]) -> Quantization:
        """What to tell the user about this model's quantization (sizes of the whole model, stored and read)."""
        dtype = min((entry.dtype for entry in self.tensors.values()), key=str)
        read = sum(_nbytes(info) for info in self.logical(stored).values())
        return Quantization(self.method, self.description, str(dtype).removeprefix("torch."),
                            sum(_nbytes(info) for info in stored.values()), read)


@dataclass(frozen=True)
class Quantization:
    """A quantized model's facts for the user: its method, kind ("4-bit (nf4)"), the dtype it is read as, and the
    bytes its quantized weights take on disk and once dequantized."""

    method: str
    description: str
    dtype: str
    stored_bytes: int
    dequantized_bytes: int

    def summary(self) -> str:
        """"4-bit (nf4), dequantized to bfloat16 on read: 3.9 GB on disk, 14.5 GB as bfloat16"."""
        return (f"{self.description}, dequantized to {self.dtype} on read: {format_bytes(self.stored_bytes)} on "
                f"disk, {format_bytes(self.dequantized_bytes)} as {self.dtype}")


def look_up(table: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """`table[codes]` for byte codes (uint8): one row of `table` per code, flattened (a table of value pairs gives
    two values per code), in the table's dtype, on the table's device. A row of 2, 4 or 8 bytes (one bf16 or float32
    value, a pair of float32) is gathered as one integer item: 0.6 ns a code on one core, against 1.4 for NumPy's
    fancy indexing of the rows as raw bytes (which first widens the codes to int64) and 2.4 for torch gathering
    rows of two floats, which made dequantizing the larger part of a 4-bit model's merge."""
    rows = table.contiguous().view(torch.uint8).reshape(table.shape[0], -1)  # any dtype, bf16 too
    index = codes.reshape(-1).to(device=table.device, dtype=torch.int32)
    item = _ITEMS.get(rows.shape[1])
    if item is None:
        return rows.index_select(0, index).view(table.dtype).reshape(-1)
    return rows.view(item).reshape(-1).index_select(0, index).view(table.dtype)


_ITEMS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # row bytes -> the integer of that size


def _nbytes(info: Stored) -> int:
    count = 1
    for size in info.shape:
        count *= size
    return count * info.dtype.itemsize


def settings_dtype(config: Mapping[str, Any] | None, default: torch.dtype = torch.bfloat16) -> torch.dtype:
    """The float dtype the model was quantized from (config.json's torch_dtype / dtype), else `default`."""
    name = str((config or {}).get("torch_dtype") or (config or {}).get("dtype") or "").removeprefix("torch.")
    dtype = getattr(torch, name, None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point and dtype.itemsize >= 2 else default


def refuse(label: str, tensor: str, problem: str) -> QuantizedCheckpointError:
    """The error for a quantized tensor whose parts do not fit its settings (named, with what is wrong)."""
    return QuantizedCheckpointError(
        f'{label} is quantized, but tensor "{tensor}" {problem}. Nothing was written.',
        why="A quantized weight is stored as packed numbers plus scales (and sometimes zero points); without all "
        "of them, or with shapes that do not fit, the real weight cannot be rebuilt, and guessing would give a "
        "silently wrong model.",
        hint="Download the model again (a file may be missing or cut short); if it stays like this, the "
        "quantized upload itself is broken: use another quantized copy or the unquantized original.",
    )


def need(stored: Mapping[str, Stored], name: str, label: str, owner: str, what: str) -> Stored:
    """The header of side tensor `name` of weight `owner`; raises QuantizedCheckpointError naming both if absent."""
    if name not in stored:
        raise refuse(label, owner, f'has no {what} (expected a tensor "{name}")')
    return stored[name]


def expect_shape(info: Stored, shape: tuple[int, ...], label: str, owner: str, name: str) -> None:
    """Raise QuantizedCheckpointError when the side tensor `name` of `owner` is not of `shape`."""
    if tuple(info.shape) != tuple(shape):
        raise refuse(label, owner, f'has "{name}" of shape {list(info.shape)} where its settings need {list(shape)}')


Planner = Callable[[Mapping[str, Stored], Mapping[str, Any], Mapping[str, Any], str, ReadStored | None],
                   QuantizedLayout]
