"""Read safetensors headers with plain Python (json + struct): tensor names, shapes and dtypes, no weights.

A safetensors file starts with an 8-byte little-endian header length and a JSON header; nothing else is read,
so listing a 15 GB model costs a few kilobytes of I/O and never imports torch.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from guiapp.errors import CheckpointError

# Larger headers do not occur in real checkpoints; a bigger length means the file is not safetensors at all.
MAX_HEADER_BYTES = 100 * 1024 * 1024
INDEX_FILE = "model.safetensors.index.json"

BYTES_PER_ELEMENT = {
    "F64": 8, "I64": 8, "U64": 8,
    "F32": 4, "I32": 4, "U32": 4,
    "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip


@dataclass(frozen=True)
class TensorRecord:
    """One tensor as its header describes it. `dtype` is the safetensors code ("BF16", "F32"…)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    file: str

    @property
    def parameters(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.parameters * BYTES_PER_ELEMENT.get(self.dtype, 0)


def parse_header(header: dict, file: str) -> dict[str, TensorRecord]:
    """Turn a decoded safetensors JSON header into records (the `__metadata__` entry is skipped).

    Raises CheckpointError when an entry lacks a dtype or shape.
    """
    records = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            records[name] = TensorRecord(name, tuple(int(d) for d in entry["shape"]), str(entry["dtype"]), file)
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(
                f"{file}: the header entry for tensor '{name}' is malformed ({error}).",
                hint="The file is damaged. Delete it and download or export the model again.",
            ) from error
    return records


def read_file_header(path: Path) -> dict[str, TensorRecord]:
    """Records of every tensor in one `.safetensors` file.

    Raises CheckpointError naming the file and what it really is (a Git LFS pointer, an HTML page, a pickle,
    a truncated file) when it is not a readable safetensors file.
    """
    path = Path(path)
    try:
        with path.open("rb") as handle:
            size = path.stat().st_size
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise _not_safetensors(path, prefix, "it is shorter than a safetensors header")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES or length + 8 > size:
                raise _not_safetensors(path, prefix + handle.read(64), "its header length does not fit the file")
            raw = handle.read(length)
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read: {error.strerror or error}.") from error
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _not_safetensors(path, prefix, "its header is not valid JSON") from error
    if not isinstance(header, dict):
        raise _not_safetensors(path, prefix, "its header is not a table of tensors")
    return parse_header(header, path.name)


def read_folder_headers(folder: Path) -> dict[str, TensorRecord]:
    """Records of every tensor of the model in `folder` (sharded with an index, or any `*.safetensors` files).

    Raises CheckpointError when the folder holds no safetensors weights (e.g. only pickle `.bin` files, whose
    contents cannot be listed without unpickling them) or when a file is not readable safetensors.
    """
    folder = Path(folder)
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
            raise CheckpointError(
                f"{index} is not a valid safetensors index ({error}).",
                hint="Download or export the model again.",
            ) from error
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


def _not_safetensors(path: Path, start: bytes, reason: str) -> CheckpointError:
    """Say what the file really is, judging by its first bytes."""
    if start.startswith(b"version https://git-lfs"):
        actual = "a Git LFS pointer (the real file was never downloaded)"
    elif start.lstrip()[:1] == b"<":
        actual = "an HTML or XML page (probably an error page saved in its place)"
    elif start[:1] == b"\x80" or start.startswith(b"PK"):
        actual = "a pickle / PyTorch archive, not safetensors"
    else:
        actual = "damaged or cut short"
    return CheckpointError(
        f"{path.name} is not a readable safetensors file: {reason}; it looks like {actual}.",
        hint=f"Delete {path} and download or export the model again.",
    )
