"""Writing a job's output: safetensors shards streamed tensor by tensor, inside a staging folder.

Every output shape and dtype is known from the plan, so each shard's header is written first and tensor data
is appended after it as it is computed, a whole tensor or a block of its rows at a time: memory never holds a
shard. The whole output is written into a hidden staging folder next to the destination and renamed into place
only when complete, so a cancelled, failed or killed job never leaves a folder that looks like a finished model.
Staging folders of dead processes are removed by `output_guard.clean_leftovers` (called before every job).
"""

from __future__ import annotations

import errno
import json
import math
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

from guiapp.checkpoints.output_guard import (
    DestinationLock,
    absolute_destination,
    check_output_location,
    clean_leftovers,
    done_with,
    mark_in_use,
    move_into_place,
    staging_name,
    write_marker,
)
from guiapp.checkpoints.reading import SAFETENSORS_CODES
from guiapp.errors import InsufficientResourcesError, OutputError
from guiapp.hub.references import ModelRef
from guiapp.progress import Progress
from guiapp.system.bounded import describe_value
from guiapp.system.paths import resolved
from guiapp.system.resources import disk
from guiapp.system.units import format_bytes

DEFAULT_SHARD_BYTES = 5_000_000_000


@dataclass(frozen=True)
class PlannedTensor:
    """One tensor the output will hold, known before any data is computed."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


MAX_SIZE_BYTES = 10**15  # 1000TB: far above any file, and a bound on what "1e400" would otherwise become


def parse_size(text: str | int) -> int:
    """Parse "2GB", "500MB", "5e9" or an integer into bytes (decimal units, as the Hub counts).

    Raises ValueError, saying the accepted range, for anything else and for sizes below 1 byte or above 1000TB
    (infinity, "nan" and negative sizes among them).
    """
    problem = f"{describe_value(text)} is not a size from 1 byte to 1000TB (examples: 2GB, 500MB, 5000000000)"
    if isinstance(text, int):
        number = float(text)
    else:
        match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([kKmMgGtT]?)(i?)[bB]?\s*", str(text))
        if not match:
            raise ValueError(problem)
        try:
            number = float(match.group(1))
        except ValueError:
            raise ValueError(problem) from None
        number *= (1024 if match.group(3) else 1000) ** " KMGT".index(match.group(2).upper() or " ")
    if not 1 <= number <= MAX_SIZE_BYTES:  # also false for nan
        raise ValueError(problem)
    return int(number)


def shard_plan(tensors: list[PlannedTensor], max_shard_bytes: int) -> list[list[PlannedTensor]]:
    """Split `tensors`, in order, into shards of at most `max_shard_bytes` (a larger tensor gets a shard alone)."""
    shards: list[list[PlannedTensor]] = [[]]
    size = 0
    for tensor in tensors:
        if shards[-1] and size + tensor.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(tensor)
        size += tensor.nbytes
    return shards if shards[0] else []


class ShardedWriter:
    """Streams tensors, in plan order, into `model.safetensors` or `model-0000i-of-0000N.safetensors` + index.

    `filename_prefix` lets other outputs reuse it ("adapter_model" for a single-file PEFT adapter). Raises
    InsufficientResourcesError when the disk fills up while writing.
    """

    def __init__(
        self,
        folder: Path,
        tensors: list[PlannedTensor],
        max_shard_bytes: int = DEFAULT_SHARD_BYTES,
        filename_prefix: str = "model",
    ) -> None:
        self._folder = Path(folder)
        self._shards = shard_plan(tensors, max_shard_bytes)
        count = len(self._shards)
        self._filenames = (
            [f"{filename_prefix}.safetensors"]
            if count <= 1
            else [f"{filename_prefix}-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]
        )
        self._prefix = filename_prefix
        self._order = [(shard_index, t) for shard_index, shard in enumerate(self._shards) for t in shard]
        self._position = 0
        self._rows_written = 0  # of the tensor at `_position`, written in parts
        self._stream: BinaryIO | None = None
        self._open_shard = -1

    @property
    def filenames(self) -> list[str]:
        return list(self._filenames)

    def write(self, name: str, tensor: torch.Tensor, first_row: int = 0) -> None:
        """Append `tensor` (already in its planned dtype) as the next planned tensor `name`: whole, or in parts of
        its rows, in order (`first_row` is the part's first row). The next tensor comes once the last row is in."""
        shard_index, planned = self._order[self._position]
        total_rows = planned.shape[0] if planned.shape else 1
        part_rows = tensor.shape[0] if planned.shape else 1
        if name != planned.name or tensor.dtype != planned.dtype or tensor.dim() != len(planned.shape) \
                or tuple(tensor.shape[1:]) != planned.shape[1:] or first_row != self._rows_written \
                or first_row + part_rows > total_rows:
            raise RuntimeError(
                f"internal error: wrote {name} {tuple(tensor.shape)} {tensor.dtype} from row {first_row}, plan "
                f"expected {planned.name} {planned.shape} {planned.dtype} from row {self._rows_written}"
            )
        if shard_index != self._open_shard:
            self._start_shard(shard_index)
        data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()
        self._guard_disk(lambda: self._stream.write(data))
        self._rows_written += part_rows
        if self._rows_written == total_rows:
            self._position += 1
            self._rows_written = 0

    def close(self) -> None:
        """Finish the last shard and write the index. Raises RuntimeError if a planned tensor was not written."""
        if self._position != len(self._order):
            missing = self._order[self._position][1].name
            raise RuntimeError(f"internal error: output closed before {missing} was written")
        self._finish_shard()
        if len(self._filenames) > 1:
            weight_map = {t.name: self._filenames[i] for i, t in self._order}
            total = sum(t.nbytes for _, t in self._order)
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            self._guard_disk(
                lambda: (self._folder / f"{self._prefix}.safetensors.index.json").write_text(json.dumps(index, indent=2))
            )

    def abort(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _start_shard(self, shard_index: int) -> None:
        self._finish_shard()
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for tensor in self._shards[shard_index]:
            header[tensor.name] = {
                "dtype": SAFETENSORS_CODES[tensor.dtype],
                "shape": list(tensor.shape),
                "data_offsets": [offset, offset + tensor.nbytes],
            }
            offset += tensor.nbytes
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)  # the format asks for 8-byte alignment of the data
        self._stream = (self._folder / self._filenames[shard_index]).open("wb")
        self._open_shard = shard_index
        self._guard_disk(lambda: self._stream.write(len(encoded).to_bytes(8, "little") + encoded))

    def _finish_shard(self) -> None:
        if self._stream is not None:
            self._guard_disk(self._stream.close)
            self._stream = None

    def _guard_disk(self, action) -> None:
        try:
            action()
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                raise InsufficientResourcesError(
                    f"The disk holding {self._folder.parent} filled up while the output was being written.",
                    hint="Free some space or choose an output folder on another disk, then run the job again. "
                    "The partial output was removed.",
                ) from None
            raise


class StagedOutput:
    """A hidden staging folder next to `destination`, renamed into place by `commit()`.

    On creation: the earlier runs' leftovers next to the destination are removed, the destination is checked by
    the output rule (`check_output_location`: not an input, the Hugging Face cache or a link; replaced only if it
    is an earlier Mergesmith output and `overwrite`), and it is locked so no other job writes there meanwhile.
    Raises OutputError (InsufficientResourcesError for a full disk) otherwise. `kind` ("merge", "extract",
    "apply") is recorded in the output's marker. Used as a context manager, the staging folder is removed and
    the lock released when the block raises.
    """

    def __init__(self, destination: Path, *, overwrite: bool = False, inputs: tuple[Path, ...] = (),
                 kind: str = "output") -> None:
        self.destination = absolute_destination(destination)
        self.kind = kind
        self._overwrite = overwrite
        self._previous = check_output_location(self.destination, inputs, replace=overwrite)
        parent = self.destination.parent
        self._lock = DestinationLock(self.destination)
        try:
            parent.mkdir(parents=True, exist_ok=True)
            clean_leftovers(parent)
            self._lock.acquire()
            self.path = staging_name(self.destination, "partial")
            mark_in_use(self.path)
            self.path.mkdir()
        except OSError as error:
            self._lock.release()
            raise _output_folder_error(parent, error) from None
        except BaseException:
            self._lock.release()
            raise
        # Checked again under the lock: another job may have finished there between the first check and now.
        try:
            self._previous = check_output_location(self.destination, inputs, replace=overwrite)
        except BaseException:
            self.discard()
            raise

    def commit(self, progress: Progress | None = None) -> Path:
        """Mark the finished output and move it into place (replacing the earlier output when overwriting, which
        `progress`'s log then says).

        Raises OutputError when the destination appeared or changed while the job ran (nothing there is touched).
        """
        try:
            write_marker(self.path, self.kind)
        except OSError as error:
            raise _output_folder_error(self.destination.parent, error) from None
        move_into_place(self.path, self.destination, self._previous, replace=self._overwrite)
        if self._previous is not None and self._overwrite and progress is not None:
            progress.log(f"Replaced {self._previous.describe()} in {self.destination}, as asked.")
        done_with(self.path)
        self._lock.release()
        return self.destination

    def discard(self) -> None:
        """Remove the staging folder and release the destination."""
        shutil.rmtree(self.path, ignore_errors=True)
        done_with(self.path)
        self._lock.release()

    def __enter__(self) -> StagedOutput:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.discard()


def local_input_folders(refs: Iterable[ModelRef]) -> tuple[Path, ...]:
    """The local folders a job reads: each local model's and each local `+adapter`'s, for the output rule (Hub
    models and adapters live in the Hugging Face cache, which outputs always keep clear of).

    Raises CheckpointError for a local path that does not exist.
    """
    folders = []
    for ref in refs:
        folders.append(ref.existing_folder())
        if ref.adapter:
            folders.append(ref.adapter.existing_folder("adapter"))
    return tuple(folder for folder in folders if folder is not None)


def _output_folder_error(parent: Path, error: OSError) -> Exception:
    """The error to show when the output folder's parent cannot be created or written."""
    if isinstance(error, PermissionError):
        return OutputError(
            f"Mergesmith cannot write in {parent}.",
            hint="Choose an output folder in a place you can write to, such as your home folder.",
        )
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return InsufficientResourcesError(f"The disk holding {parent} is full.", hint="Free some space.")
    if error.errno == errno.EROFS:
        return OutputError(f"{parent} is on a read-only disk.", hint="Choose another output folder.")
    if isinstance(error, (FileExistsError, NotADirectoryError)):
        return OutputError(f"The folder {parent} cannot be created: part of that path is a file.",
                           hint="Choose an output folder whose parent folders are folders.")
    return error


def check_free_space(folder: Path, needed_bytes: int) -> None:
    """Raise InsufficientResourcesError when the disk holding `folder` has less than `needed_bytes` free (and
    OutputError, from `disk`, when it cannot be examined)."""
    where = disk(resolved(folder))
    if where.free < needed_bytes:
        raise InsufficientResourcesError(
            f"The output needs {format_bytes(needed_bytes)} but the disk holding {where.path} has only "
            f"{format_bytes(where.free)} free.",
            hint=f"Free at least {format_bytes(needed_bytes - where.free)}, or choose an output folder on another "
            "disk.",
        )
