"""Reading tensor data from a safetensors file that another program may change while Mergesmith reads it.

Tensors are read with positional reads (`os.preadv`) into a fresh buffer, not through a memory map: when a
memory-mapped file shrinks under the reader, touching the lost pages kills the process with SIGBUS; a
positional read just comes back short. Before each read the open file is checked against the size and
modification time it had when its header was read, so a file rewritten or cut in place is named as such.
Warming the page cache is the one use of a map, and it never touches the mapped memory (see `warm`).
"""

from __future__ import annotations

import math
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import torch

from guiapp.errors import CheckpointError
from guiapp.system.memory import read_into_page_cache

_POPULATE_CHUNK = 8 << 20
_populate_works = True  # until the system says it cannot


class SafetensorsFile:
    """An open safetensors file whose header has been read: `read` returns one tensor, `read_rows`
    some of its rows.

    Takes ownership of `stream` (opened with `guiapp.system.bounded.open_regular_file`); `data_start` is the
    offset of the first data byte (8 + header length). Close it to release the file.
    """

    def __init__(self, path: Path, stream: BinaryIO, data_start: int):
        self.path = path
        self._stream = stream
        self._data_start = data_start
        self._identity = file_identity(stream.fileno())
        self._seek_lock = threading.Lock()  # only where positional reads are missing (Windows)

    def read(self, name: str, data_offsets: tuple[int, int], dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """The tensor `name` stored at `data_offsets` (relative to the data start), as a new CPU tensor.

        Raises CheckpointError when the file was changed or cut by another program since its header was read.
        """
        begin, end = data_offsets
        return self._read_bytes(name, begin, end).view(dtype).reshape(shape)

    def read_rows(self, name: str, data_offsets: tuple[int, int], dtype: torch.dtype, shape: tuple[int, ...],
                  rows: range) -> torch.Tensor:
        """The rows `rows` (consecutive, within the first dimension) of that tensor, as a new CPU tensor: a
        positional read of their bytes alone, so memory holds the rows asked for, not the tensor.

        Raises CheckpointError as `read` does.
        """
        row_bytes = math.prod(shape[1:]) * dtype.itemsize
        begin = data_offsets[0] + rows.start * row_bytes
        return self._read_bytes(name, begin, begin + len(rows) * row_bytes).view(dtype).reshape(len(rows), *shape[1:])

    def warm(self, data_offsets: tuple[int, int], scratch: memoryview, stop: Callable[[], bool]) -> None:
        """Bring the bytes at `data_offsets` into the system's page cache, so the next real read of them comes
        from memory: where the kernel can, by asking it to (no copy), otherwise by reading them into `scratch`,
        piece by piece, and dropping them. Stops early when `stop()` says so or a read fails or comes back short
        (the real read reports that)."""
        offset, end = self._data_start + data_offsets[0], self._data_start + data_offsets[1]
        if self._populate(offset, end, stop):
            return
        while offset < end and not stop():
            try:
                count = self._read_into(scratch[: min(len(scratch), end - offset)], offset)
            except CheckpointError:
                return
            if count <= 0:
                return
            offset += count

    def _populate(self, begin: int, end: int, stop: Callable[[], bool]) -> bool:
        """Bytes `begin` to `end` of the file into the page cache without a copy (`read_into_page_cache`), a piece
        at a time until `stop()`; False when the system cannot do that (nothing was done then). A piece that cannot
        be read (the file cut meanwhile) ends the warming."""
        global _populate_works
        start = begin - begin % mmap.PAGESIZE
        while _populate_works and start < end and not stop():
            length = min(_POPULATE_CHUNK, end - start)
            done = read_into_page_cache(self._stream.fileno(), start, length)
            if done is None:
                _populate_works = False
                return False
            if not done:
                return True
            start += length
        return _populate_works

    def _read_bytes(self, name: str, begin: int, end: int) -> torch.Tensor:
        """Bytes `begin` to `end` (relative to the data start) of the tensor `name`, checked against changes."""
        self._check_unchanged(name)
        buffer = torch.empty(end - begin, dtype=torch.uint8)
        target = memoryview(buffer.numpy())
        done = 0
        while done < len(target):
            count = self._read_into(target[done:], self._data_start + begin + done)
            if count <= 0:
                self._check_unchanged(name)
                raise changed_file_error(self.path, name, f"it ended before tensor \"{name}\" did")
            done += count
        return buffer

    def close(self) -> None:
        self._stream.close()

    def _read_into(self, target: memoryview, offset: int) -> int:
        try:
            if hasattr(os, "preadv"):
                return os.preadv(self._stream.fileno(), [target], offset)
            with self._seek_lock:
                self._stream.seek(offset)
                return self._stream.readinto(target) or 0
        except OSError as error:
            raise CheckpointError(f"{self.path} cannot be read: {error.strerror or error}.",
                                  hint="Check the disk the model is on, then run the job again.") from None

    def _check_unchanged(self, name: str) -> None:
        size, modified = self._identity
        now_size, now_modified = file_identity(self._stream.fileno())
        if now_size != size:
            raise changed_file_error(self.path, name, f"it was {size:,} bytes and is now {now_size:,}")
        if now_modified != modified:
            raise changed_file_error(self.path, name, "it was rewritten in place")


def file_identity(file: Path | int) -> tuple[int, int]:
    """(size, modification time in ns) of a path or an open descriptor: what changes when a file is rewritten."""
    status = os.fstat(file) if isinstance(file, int) else os.stat(file)
    return status.st_size, status.st_mtime_ns


def changed_file_error(path: Path, name: str, how: str) -> CheckpointError:
    """The error for a model file that another program changed while the tensor `name` was being read."""
    return CheckpointError(
        f"{path} was changed by another program while Mergesmith was reading it ({how}; reading "
        f"tensor \"{name}\"). Nothing was written.",
        why="A download, sync or copy still writing the model's files, or a program deleting or truncating "
        "them, changed the file under the job.",
        hint="Wait until nothing else writes to the model folder, then run the job again. If the file is now "
        "damaged, download it again.",
    )
