"""The inputs of a search's merges, read from disk once and kept in memory for every later trial.

Between two trials only the recipe's numbers change: the tensors the merge loop reads (whole tensors, or a block of
rows of one) are the same every time. `KeptReaders` stands in for the inputs' readers: the first trial reads each
piece from disk and keeps it, as stored, while the budget lasts; later trials get the kept tensor, so a trial is
the method's arithmetic and the evaluation. A piece beyond the budget is read from disk at every trial, as
before. The merge loop is handed exactly the tensors it would have read, so a trial's merge is bit for bit the one
`mergesmith merge` makes (the merge loop and its methods never change their inputs).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from guiapp.checkpoints.sources import ModelReader
from guiapp.system.resources import memory

# Kept inputs take at most half the size of the model being scored: a search then holds at most about 1.5 times
# what one merge plus one perplexity run of its result hold (the model once), however many inputs the recipe has.
# Keeping all three inputs of a 1 GB merge held 4.4 GB against 1.8 GB for the merge and the perplexity run, to save
# 0.4 s of a 10 s trial: the operating system's page cache keeps the rest of them fast to read again.
MODEL_SHARE = 0.5
# And at most this share of the memory available when the search starts: the rest stays for the model being
# scored, the merge loop's blocks and other programs (and for other Ray workers on the same machine).
KEEP_SHARE = 0.25


def default_budget(model_bytes: int) -> int:
    """The bytes of inputs a search keeps when not told, for a model of `model_bytes` in memory: `MODEL_SHARE` of
    it, and at most `KEEP_SHARE` of the memory available now."""
    return min(int(model_bytes * MODEL_SHARE), int(memory().available * KEEP_SHARE))


class KeptReaders:
    """The readers of one search's inputs, keeping what they read within `budget` bytes (shared by all inputs)."""

    def __init__(self, readers: list[ModelReader], budget: int) -> None:
        self.readers = [_KeptReader(self, reader) for reader in readers]
        self.budget = budget
        self.kept_bytes = 0
        self._kept: dict[tuple, torch.Tensor] = {}
        self._held: set[tuple[int, str]] = set()  # (reader, tensor) of which some piece is kept
        self._refused: set[tuple[int, str]] = set()  # (reader, tensor) of which some piece is read every time

    def piece(self, key: tuple, name: tuple[int, str], read: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The kept tensor of `key`, else `read()`'s, kept when it fits the budget."""
        tensor = self._kept.get(key)
        if tensor is not None:
            return tensor
        tensor = read()
        size = tensor.numel() * tensor.element_size()
        if self.kept_bytes + size <= self.budget:
            self._kept[key] = tensor
            self._held.add(name)
            self.kept_bytes += size
        else:
            self._refused.add(name)
        return tensor

    def warms(self, name: tuple[int, str]) -> bool:
        """Whether bringing `name`'s bytes into the page cache may still help: a piece of it is read from disk."""
        return name in self._refused or name not in self._held

    def close(self) -> None:
        """Let go of the kept tensors and close the inputs."""
        self._kept.clear()
        for reader in self.readers:
            reader.close()


class _KeptReader:
    """One input's reader as the merge loop uses it (`read`, `read_rows`, `warm`), through its search's keeping."""

    def __init__(self, keeping: KeptReaders, reader: ModelReader) -> None:
        self._keeping = keeping
        self._reader = reader

    @property
    def folder(self) -> Path:
        return self._reader.folder

    def read(self, name: str) -> torch.Tensor:
        """`ModelReader.read`, kept; raises what it raises."""
        key = (id(self), name)
        return self._keeping.piece((*key, None), key, lambda: self._reader.read(name))

    def read_rows(self, name: str, rows: range) -> torch.Tensor:
        """`ModelReader.read_rows`, kept; raises what it raises."""
        key = (id(self), name)
        return self._keeping.piece((*key, rows.start, rows.stop), key, lambda: self._reader.read_rows(name, rows))

    def warm(self, name: str, scratch: memoryview, stop: Callable[[], bool]) -> None:
        if self._keeping.warms((id(self), name)):
            self._reader.warm(name, scratch, stop)

    def close(self) -> None:
        self._reader.close()
