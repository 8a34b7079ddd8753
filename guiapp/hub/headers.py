"""Read safetensors headers with plain Python (json + struct): tensor names, shapes and dtypes, no weights.

A safetensors file starts with an 8-byte little-endian header length and a JSON header; nothing else is read,
so listing a 15 GB model costs a few kilobytes of I/O and never imports torch.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from guiapp.errors import CheckpointError
from guiapp.facts.dtypes import BY_CODE
from guiapp.facts.tensor_roles import LAYER_CONTAINERS
from guiapp.system.bounded import INDEX_JSON_BYTES, describe_value, load_json_limited, open_regular_file

# Larger headers do not occur in real checkpoints (the format's own limit is 100 MB); a bigger length means the
# file is not safetensors at all.
MAX_HEADER_BYTES = 100_000_000
INDEX_FILE = "model.safetensors.index.json"
# Real models have at most a few hundred layers; stacked frankenmerges a few thousand. A header naming a layer
# past this is refused, so no plan, estimate or config ever counts to its number.
MAX_LAYER_INDEX = 99_999
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:" + "|".join(LAYER_CONTAINERS) + r")\.(\d+)(?=\.)")


REDOWNLOAD_HINT = (
    "Delete the file and download it again (a Hub model: delete it from the Downloaded list first), "
    "or export the model again."
)


def bytes_per_element(code: str) -> int | None:
    """Bytes one element of the safetensors dtype `code` takes ("BF16" → 2), None for a code it does not know."""
    facts = BY_CODE.get(code.upper())
    return facts.bytes if facts else None


@dataclass(frozen=True)
class TensorRecord:
    """One tensor as its header describes it. `dtype` is the safetensors code ("BF16", "F32"…), one of `facts.dtypes.BY_CODE`."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    file: str
    # Where the data lies after the header (checked against the shape, and against the file's size when known).
    data_offsets: tuple[int, int] | None = None

    @property
    def parameters(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.parameters * BY_CODE[self.dtype].bytes


def parse_header(
    header: dict[str, Any], label: str, file: str, data_size: int | None = None
) -> dict[str, TensorRecord]:
    """Check a decoded safetensors JSON header and turn it into records (the `__metadata__` entry is checked,
    then skipped).

    Local files and Hub files (read over range requests) both come through here, so they get the same
    diagnostics. `label` names the file in messages; `data_size` (the bytes after the header, when known)
    lets truncation and bytes after the last tensor be found. Raises CheckpointError for an entry that is
    malformed, has a dtype that is not a safetensors dtype, or whose offsets disagree with its shape, run past
    the end of the file, overlap another tensor's or leave bytes that belong to no tensor (the format's rule, as
    the safetensors library enforces it), and for a `__metadata__` entry that does not map text to text.
    """
    records = {}
    for name, entry in header.items():
        if name == "__metadata__":
            _check_metadata(entry, label)
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str):
            raise CheckpointError(f'{label} is damaged: the header entry of tensor "{name}" has no dtype.',
                                  hint=REDOWNLOAD_HINT)
        code = entry["dtype"]
        if code not in BY_CODE:
            raise CheckpointError(
                f'{label} describes tensor "{name}" with dtype {code!r}, which is not a safetensors dtype.',
                why="The file is damaged, or was written by a tool that does not follow the safetensors format.",
                hint=REDOWNLOAD_HINT,
            )
        shape = entry.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise CheckpointError(f'{label} is damaged: tensor "{name}" has the shape {shape!r}.',
                                  hint=REDOWNLOAD_HINT)
        record = TensorRecord(name, tuple(shape), code, file)
        _check_offsets(record, entry.get("data_offsets"), label, data_size)
        offsets = entry.get("data_offsets")
        records[name] = replace(record, data_offsets=tuple(offsets)) if offsets is not None else record
    _check_layout(list(records.values()), label, data_size)
    check_layer_indices(records, label)
    return records


def check_layer_indices(names: Iterable[str], label: str) -> None:
    """Raise CheckpointError naming `label` and the tensor when a tensor name numbers its layer past
    MAX_LAYER_INDEX (`model.layers.1000000000.…`, or an index of 5,000 digits). Costs time linear in the names'
    length, whatever the numbers: digits are counted before any is converted."""
    for name in names:
        for match in _LAYER_INDEX.finditer(name):
            digits = match.group(1).lstrip("0")
            if len(digits) > len(str(MAX_LAYER_INDEX)) or (digits and int(digits) > MAX_LAYER_INDEX):
                shown = digits if len(digits) <= 20 else f"with an index of {len(digits):,} digits"
                raise CheckpointError(
                    f"{label} names tensor {describe_value(name, 100)} as part of layer {shown}, far past any real "
                    f"model (Mergesmith reads layers up to {MAX_LAYER_INDEX:,}).",
                    why="Tensor names number the model's layers from 0; a number this large means the file is "
                    "damaged or was made to mislead the programs that read it.",
                    hint=REDOWNLOAD_HINT,
                )


def _check_metadata(metadata: Any, label: str) -> None:
    """Raise CheckpointError unless the header's `__metadata__` maps text to text (or is null), as the format
    requires."""
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise CheckpointError(
            f'{label} is damaged: its "__metadata__" entry must be a table of text, not {describe_value(metadata)}.',
            hint=REDOWNLOAD_HINT,
        )
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise CheckpointError(
                f'{label} is damaged: the "__metadata__" entry {describe_value(key, 40)} must be text, not '
                f"{describe_value(value)}.",
                why="The safetensors format allows only text values in a file's metadata; a file that breaks that "
                "rule was not written by a safetensors library.",
                hint=REDOWNLOAD_HINT,
            )


def _check_layout(records: list[TensorRecord], label: str, data_size: int | None) -> None:
    """Raise CheckpointError unless the tensors' data lie one after the other from the first data byte, each
    where the previous one ends, and (when `data_size` is known) end exactly at the end of the file.

    Overlapping tensors would make one tensor's bytes be read as another's; the safetensors library refuses
    such files, and so does Mergesmith.
    """
    placed = sorted((r for r in records if r.data_offsets is not None), key=lambda r: r.data_offsets)
    end, previous = 0, None
    for record in placed:
        begin = record.data_offsets[0]
        if begin < end:
            raise CheckpointError(
                f"{label} is damaged: the data of tensors {describe_value(previous.name)} and "
                f"{describe_value(record.name)} overlap (bytes {begin:,} to {min(end, record.data_offsets[1]):,}), "
                "so one of them would be read from the other's bytes.",
                why="In a safetensors file every tensor has its own bytes; a header whose tensors share bytes is "
                "damaged or was made to mislead the reader.",
                hint=REDOWNLOAD_HINT,
            )
        if begin > end:
            raise CheckpointError(
                f"{label} is damaged: bytes {end:,} to {begin:,} of its data belong to no tensor (tensor "
                f"{describe_value(record.name)} starts at {begin:,}).",
                hint=REDOWNLOAD_HINT,
            )
        end, previous = record.data_offsets[1], record
    if data_size is not None and placed and end < data_size:
        raise CheckpointError(
            f"{label} is damaged: it holds {data_size - end:,} bytes after the last tensor that belong to no tensor.",
            hint=REDOWNLOAD_HINT,
        )


def _check_offsets(record: TensorRecord, offsets: Any, label: str, data_size: int | None) -> None:
    """Raise CheckpointError when a tensor's data offsets disagree with its shape or lie past the data."""
    if offsets is None and data_size is None:
        return  # a Hub header parsed by huggingface_hub, which checked the offsets already
    valid = isinstance(offsets, list) and len(offsets) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) for v in offsets
    )
    if not valid or offsets[0] < 0 or offsets[1] - offsets[0] != record.nbytes:
        said = f"{offsets[1] - offsets[0]:,}" if valid else repr(offsets)
        raise CheckpointError(
            f'{label} is damaged: tensor "{record.name}" should take {record.nbytes:,} bytes but its offsets '
            f"say {said}.",
            hint=REDOWNLOAD_HINT,
        )
    if data_size is not None and offsets[1] > data_size:
        raise CheckpointError(
            f'{label} is truncated: tensor "{record.name}" ends at byte {offsets[1]:,} of the data but the file '
            f"holds only {data_size:,}. The download was probably cut short.",
            hint=REDOWNLOAD_HINT,
        )


def decode_header(raw: bytes, label: str) -> Any:
    """The JSON value of a safetensors header's bytes `raw`.

    Raises CheckpointError naming `label` (see `damaged_header`) when they are not UTF-8 JSON, nest too deeply
    to decode (a header nested 100,000 deep), or hold a number too long to convert.
    """
    try:
        return json.loads(raw.decode("utf-8"))
    except (RecursionError, ValueError) as failure:  # ValueError: bad UTF-8 or JSON, a number of 4,300+ digits
        raise damaged_header(label, failure) from None


def damaged_header(label: str, failure: Exception) -> CheckpointError:
    """The error for the header of `label` that could not be decoded because of `failure`: JSON nesting too deep
    (RecursionError), not JSON or a number too long (ValueError), or not a table of tensors (anything else)."""
    if isinstance(failure, RecursionError):
        what = "its JSON nests too deeply to be a safetensors header"
    elif isinstance(failure, json.JSONDecodeError):
        what = f"not valid JSON: {failure.msg}"
    elif isinstance(failure, ValueError):
        what = f"not valid JSON: {str(failure).split(':')[0]}"
    else:
        what = "not a table of tensors"
    return CheckpointError(f"{label} has a damaged header ({what}).", hint=REDOWNLOAD_HINT)


def describe_non_safetensors(head: bytes) -> str | None:
    """Say what a file that should be safetensors really is, from its first bytes; None if it may be safetensors."""
    text = head.lstrip()
    if text.startswith(b"version https://git-lfs"):
        return "a Git LFS pointer (a small text file standing in for the weights, which were never downloaded)"
    if text[:15].lower().startswith((b"<!doctype", b"<html", b"<?xml", b"<head")):
        return "an HTML page (an error or login page saved in place of the weights)"
    if head.startswith(b"PK\x03\x04"):
        return "a PyTorch zip checkpoint (pickle), not safetensors"
    if head[:1] == b"\x80":
        return "a Python pickle, not safetensors"
    if text.startswith((b"{", b"[")):
        return "a JSON text file, not safetensors"
    return None


def read_safetensors_header(
    stream: BinaryIO, size: int, label: str, file: str | None = None
) -> tuple[dict[str, TensorRecord], int]:
    """Read and check the header of a safetensors file of `size` bytes open as `stream` (at its start).

    Returns (records, data start offset); `file` (default: the last part of `label`) is what records name as
    their file. Raises CheckpointError as `read_header_at` does.
    """

    def read(offset: int, count: int) -> bytes:
        stream.seek(offset)
        return stream.read(count)

    return read_header_at(read, size, label, file)


def read_header_at(
    read: Callable[[int, int], bytes], size: int, label: str, file: str | None = None
) -> tuple[dict[str, TensorRecord], int]:
    """Read and check the header of a safetensors file of `size` bytes, whose bytes `read(offset, count)` returns
    (from a local file, or over range requests from the Hub: both are checked alike).

    Returns (records, data start offset); `file` (default: the last part of `label`) is what records name as
    their file. Raises CheckpointError naming `label` and what the file really is (a Git LFS pointer, an HTML
    page, a pickle, a download cut short, a header that lies about offsets).
    """
    head = read(0, 64)
    header_len = struct.unpack("<Q", head[:8])[0] if len(head) >= 8 else 0
    looks_valid = len(head) > 8 and head[8:9] == b"{" and header_len <= MAX_HEADER_BYTES and 8 + header_len <= size
    if not looks_valid:
        what = describe_non_safetensors(head)
        if what is not None:
            raise CheckpointError(f"{label} is not a readable safetensors file: it is {what}.", hint=REDOWNLOAD_HINT)
        if size < 8:
            raise CheckpointError(
                f"{label} is only {size} bytes, shorter than a safetensors header: the download was cut short.",
                hint=REDOWNLOAD_HINT,
            )
        raise CheckpointError(
            f"{label} is not a complete safetensors file: its header claims {header_len:,} bytes but the file "
            f"has {size:,}. The download was cut short, or the file is not safetensors.",
            hint=REDOWNLOAD_HINT,
        )
    header = decode_header(read(8, header_len), label)
    if not isinstance(header, dict):
        raise damaged_header(label, TypeError())
    file = file if file is not None else Path(label).name
    return parse_header(header, label, file, data_size=size - 8 - header_len), 8 + header_len


def read_file_header(path: Path) -> dict[str, TensorRecord]:
    """Records of every tensor in one `.safetensors` file.

    Raises CheckpointError naming the file and what it really is when it is not a readable safetensors file.
    """
    path = Path(path)
    try:
        with open_regular_file(path, CheckpointError, what="model file") as stream:
            return read_safetensors_header(stream, os.fstat(stream.fileno()).st_size, str(path))[0]
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read: {error.strerror or error}.") from error


def index_shards(document: Any, label: str, hint: str = REDOWNLOAD_HINT) -> list[str]:
    """The weight files a decoded index (`model.safetensors.index.json`, named `label` in messages) lists, sorted.

    Raises CheckpointError (with `hint`) unless its `weight_map` is a non-empty table of tensor names to file
    names (text).
    """
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(
            f'{label} is not a valid index: its "weight_map" must be a table of tensor names and their files, '
            f"not {describe_value(weight_map)}.",
            hint=hint,
        )
    if not weight_map:
        raise CheckpointError(f'{label} lists no tensors: its "weight_map" is empty, so the model has no weights.',
                              hint=hint)
    wrong = next((name for name, file in weight_map.items() if not isinstance(file, str) or not file), None)
    if wrong is not None:
        raise CheckpointError(
            f'{label} is not a valid index: its "weight_map" gives tensor {describe_value(wrong, 60)} the file '
            f"{describe_value(weight_map[wrong])}, not a file name.",
            hint=hint,
        )
    return sorted(set(weight_map.values()))


def read_folder_headers(folder: Path) -> dict[str, TensorRecord]:
    """Records of every tensor of the model in `folder` (sharded with an index, or any `*.safetensors` files).

    Raises CheckpointError when the folder holds no safetensors weights (e.g. only pickle `.bin` files, whose
    contents cannot be listed without unpickling them) or when a file is not readable safetensors.
    """
    folder = Path(folder)
    index = folder / INDEX_FILE
    if index.is_file():
        document = load_json_limited(index, INDEX_JSON_BYTES, CheckpointError, what="index file",
                                     hint="Download or export the model again.")
        files = index_shards(document, str(index), hint="Download or export the model again.")
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        has_pickles = any(folder.glob("*.bin")) or any(folder.glob("*.pt"))
        raise CheckpointError(
            f"{folder} has no .safetensors weights"
            + (" (only pickle .bin/.pt files, which cannot be inspected safely)." if has_pickles else "."),
            hint="Choose a folder that holds a model in safetensors format, or a safetensors version of it.",
        )
    records: dict[str, TensorRecord] = {}
    for name in files:
        records.update(read_file_header(folder / name))
    return records
