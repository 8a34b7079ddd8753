"""A tensor that a merge reads in several passes (TIES) is read from disk while the tensor before it is merged, by a
thread of its own that ends with the merge, however the merge ends."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

import guiapp.merging.merge as merge_module
from guiapp.checkpoints import weight_file
from guiapp.checkpoints.reading import open_checkpoint
from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.checkpoints.weight_file import SafetensorsFile
from guiapp.merging.merge import BLOCK_ELEMENTS, MergeSettings, plan_merge, run_merge, streams_in_blocks
from tests.engine.helpers import recipe

_SHAPE = LlamaShape(layers=1, vocab=BLOCK_ELEMENTS // 64 + 5)  # embeddings and lm_head just over a block


def _recipe(tmp_path: Path, method: str) -> str:
    base = write_llama(tmp_path / "base", _SHAPE, seed=0)
    tuned = [write_llama(tmp_path / f"tuned{i}", _SHAPE, seed=i) for i in (1, 2)]
    density = "density: 0.5, " if method == "ties" else ""
    models = "".join(f"  - model: {path}\n    parameters: {{{density}weight: 0.5}}\n" for path in tuned)
    return f"merge_method: {method}\nbase_model: {base}\nmodels:\n{models}"


def _reads_by_thread(monkeypatch) -> list[tuple[str, str, int]]:
    """(thread name, file, offset) of every read from a safetensors file, in order, and of every range the kernel
    was asked to bring into the page cache (by its first byte)."""
    reads: list[tuple[str, str, int]] = []
    real_read_into, real_populate = SafetensorsFile._read_into, SafetensorsFile._populate

    def recorded(self, target, offset):
        reads.append((threading.current_thread().name, str(self.path), offset))
        return real_read_into(self, target, offset)

    def recorded_populate(self, begin, end, stop):
        reads.append((threading.current_thread().name, str(self.path), begin))
        return real_populate(self, begin, end, stop)

    monkeypatch.setattr(SafetensorsFile, "_read_into", recorded)
    monkeypatch.setattr(SafetensorsFile, "_populate", recorded_populate)
    return reads


def _warm_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "mergesmith-warm"]


def test_the_next_ranked_tensor_is_read_from_disk_before_its_first_pass(tmp_path, monkeypatch):
    text = _recipe(tmp_path, "ties")
    plan = plan_merge(recipe(text))
    ranked = [task for task in plan.tasks if streams_in_blocks(plan, task)]
    assert len(ranked) == 2  # the embeddings and lm_head
    reads = _reads_by_thread(monkeypatch)
    real_count_block = merge_module._count_block

    def slow_count_block(*args):  # room for the warming thread on a busy machine
        time.sleep(0.2)
        return real_count_block(*args)

    monkeypatch.setattr(merge_module, "_count_block", slow_count_block)
    run_merge(recipe(text), MergeSettings(tmp_path / "out"))

    warmed = {(file, offset) for thread, file, offset in reads if thread == "mergesmith-warm"}
    assert len(warmed) == len(ranked[1].inputs)  # the second ranked tensor of each input, one read each (< 8 MB)
    for place in warmed:  # read from disk ahead of the loop's own reader
        assert next(thread for thread, file, offset in reads if (file, offset) == place) == "mergesmith-warm"
    assert not _warm_threads()


def test_the_first_tensor_and_single_pass_merges_are_not_read_twice(tmp_path, monkeypatch):
    reads = _reads_by_thread(monkeypatch)
    run_merge(recipe(_recipe(tmp_path, "task_arithmetic")), MergeSettings(tmp_path / "single-pass"))
    assert reads and not any(thread == "mergesmith-warm" for thread, _, _ in reads)
    assert not _warm_threads()


def test_the_warming_thread_ends_when_the_merge_fails(tmp_path, monkeypatch):
    text = _recipe(tmp_path, "ties")
    real_merge_block = merge_module._merge_block

    def failing(*args, **kwargs):
        time.sleep(0.2)
        raise OSError("the disk is gone")

    monkeypatch.setattr(merge_module, "_merge_block", failing)
    with pytest.raises(OSError):
        run_merge(recipe(text), MergeSettings(tmp_path / "failed"))
    assert not _warm_threads()
    monkeypatch.setattr(merge_module, "_merge_block", real_merge_block)


def _one_file(tmp_path: Path):
    folder = write_llama(tmp_path / "model", _SHAPE, seed=0)
    checkpoint = open_checkpoint(folder)
    offsets = {tensor: checkpoint.tensors[tensor].data_offsets for tensor in checkpoint.tensors}
    name = max(offsets, key=lambda tensor: offsets[tensor][1] - offsets[tensor][0])  # the largest, several MB
    return checkpoint, name


@pytest.mark.skipif(sys.platform != "linux", reason="madvise(MADV_POPULATE_READ) is Linux's")
def test_warming_asks_the_kernel_and_copies_nothing_where_it_can(tmp_path, monkeypatch):
    checkpoint, name = _one_file(tmp_path)
    copied = []
    monkeypatch.setattr(SafetensorsFile, "_read_into", lambda self, target, offset: copied.append(offset) or 0)
    checkpoint.warm(name, memoryview(bytearray(1 << 20)), lambda: False)
    checkpoint.close()
    assert copied == [] and weight_file._populate_works


def test_warming_reads_and_drops_the_bytes_where_the_kernel_cannot(tmp_path, monkeypatch):
    checkpoint, name = _one_file(tmp_path)
    monkeypatch.setattr(weight_file, "_populate_works", False)
    copied, real_read_into = [], SafetensorsFile._read_into
    monkeypatch.setattr(SafetensorsFile, "_read_into", lambda self, target, offset: copied.append(len(target))
                        or real_read_into(self, target, offset))
    checkpoint.warm(name, memoryview(bytearray(1 << 20)), lambda: False)
    checkpoint.close()
    start, end = checkpoint.tensors[name].data_offsets
    assert sum(copied) == end - start and max(copied) == 1 << 20  # all of it, 1 MB at a time


@pytest.mark.parametrize("kernel_can", [True, False])
def test_warming_a_file_cut_meanwhile_ends_quietly(tmp_path, monkeypatch, kernel_can):
    """Another program cuts the file after its header was read: touching a map of the lost pages would kill the
    process with SIGBUS; warming just stops, and the real read names the problem."""
    if not kernel_can:
        monkeypatch.setattr(weight_file, "_populate_works", False)
    checkpoint, name = _one_file(tmp_path)
    info = checkpoint.tensors[name]
    os.truncate(checkpoint.folder / info.file, 4096)
    checkpoint.warm(name, memoryview(bytearray(1 << 20)), lambda: False)
    with pytest.raises(weight_file.CheckpointError, match="changed|ended|cut"):
        checkpoint.read(name)
    checkpoint.close()


def test_reading_into_the_page_cache_says_when_the_system_cannot(tmp_path):
    """A pipe cannot be mapped: the answer is "cannot" (None), so warming falls back to reading; a regular file on
    Linux is read in (True)."""
    from guiapp.system.memory import read_into_page_cache

    readable, writable = os.pipe()
    try:
        assert read_into_page_cache(readable, 0, 4096) is None
    finally:
        os.close(readable)
        os.close(writable)
    path = tmp_path / "data"
    path.write_bytes(bytes(1 << 20))
    with path.open("rb") as stream:
        assert read_into_page_cache(stream.fileno(), 0, 1 << 20) is (True if sys.platform == "linux" else None)
