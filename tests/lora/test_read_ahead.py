"""Extraction reads the next module ahead on one reader thread while the current one is decomposed on the cores the
thread policy gives: the adapter is the same as module-by-module work would give, the reader is never more than one
module ahead, and each kind of work gets its number of threads. Counts and order, not timings."""

from __future__ import annotations

import threading
import zlib

import torch

from guiapp.checkpoints.sources import ModelReader
from guiapp.lora import extract as lora_extract
from guiapp.lora.lowrank import RankRule
from guiapp.progress import Progress
from guiapp.system.threads import ThreadPolicy, logical_cores
from tests.lora.helpers import adapter_report, extract, finetune


def _planted_rank(module: str) -> int:
    return 1 + zlib.crc32(module.encode()) % 5


def test_every_module_gets_its_own_update_with_read_ahead(llama_base, tmp_path):
    # Each module's update has its own rank; a module decomposed with a neighbour's difference would show the
    # neighbour's rank.
    tuned = finetune(llama_base, tmp_path / "tuned", rank_of=_planted_rank, scale=0.5, shift_1d=0.0)
    extract(llama_base, tuned, tmp_path / "adapter", RankRule("threshold", 0.01), solver="exact")
    ranks = {m["module"]: m["rank"] for m in adapter_report(tmp_path / "adapter")["modules"] if m["kind"] == "lora"}
    assert len(ranks) > 10
    assert len(set(ranks.values())) > 1
    assert ranks == {module: _planted_rank(module) for module in ranks}


class _Recorder(Progress):
    def __init__(self, events: list) -> None:
        super().__init__()
        self.events = events

    def start_stage(self, name: str, *args, **kwargs) -> None:
        self.events.append(("stage", name, threading.current_thread().name, torch.get_num_threads()))
        super().start_stage(name, *args, **kwargs)

    def step(self, item: str = "", units: int = 1, nbytes: int = 0, work: float = 0.0) -> None:
        self.events.append(("step", item, threading.current_thread().name, torch.get_num_threads()))
        super().step(item, units, nbytes, work)


def test_the_reader_runs_on_one_thread_at_most_one_module_ahead(llama_base, llama_planted, tmp_path, monkeypatch):
    events: list = []
    real_read = ModelReader.read

    def recorded_read(self, name):
        events.append(("read", name, threading.current_thread().name, torch.get_num_threads()))
        return real_read(self, name)

    monkeypatch.setattr(ModelReader, "read", recorded_read)
    settings = lora_extract.ExtractionSettings(str(llama_base), str(llama_planted), tmp_path / "adapter",
                                               threads=ThreadPolicy(busy_elsewhere=lambda: 0.0))
    lora_extract.extract_lora(settings, _Recorder(events))

    stages = [i for i, e in enumerate(events) if e[0] == "stage"] + [len(events)]
    start = next(i for i, e in enumerate(events) if e[0] == "stage" and e[1] == "Extracting")
    extracting = events[start + 1:min(i for i in stages if i > start)]
    steps = [e[1] for e in extracting if e[0] == "step"]
    comparing = [e for e in extracting if e[0] == "read"]
    assert comparing and {e[2] for e in comparing} == {"mergesmith-read_0"}
    assert {e[3] for e in comparing} == {1}  # differences and casts are memory-bound: one thread
    position = {module: index for index, module in enumerate(steps)}
    done = 0
    for event in extracting:
        if event[0] == "step":
            done += 1
        else:
            module = lora_extract.split_module(event[1])[0]
            assert position[module] <= done + 1, f"{event[1]} read more than one module ahead"


def _decomposition_threads(llama_base, llama_planted, tmp_path, monkeypatch, policy: ThreadPolicy) -> set[int]:
    seen = set()
    real_decompose = lora_extract.decompose

    def recorded(*args, **kwargs):
        seen.add(torch.get_num_threads())
        return real_decompose(*args, **kwargs)

    monkeypatch.setattr(lora_extract, "decompose", recorded)
    settings = lora_extract.ExtractionSettings(str(llama_base), str(llama_planted), tmp_path / "adapter",
                                               threads=policy)
    lora_extract.extract_lora(settings)
    return seen


def test_decompositions_use_the_free_cores_within_the_limit(llama_base, llama_planted, tmp_path, monkeypatch):
    before = torch.get_num_threads()
    quiet = _decomposition_threads(llama_base, llama_planted, tmp_path / "quiet", monkeypatch,
                                   ThreadPolicy(busy_elsewhere=lambda: 0.0))
    assert quiet == {logical_cores()}
    limited = _decomposition_threads(llama_base, llama_planted, tmp_path / "limited", monkeypatch,
                                     ThreadPolicy(limit=1, busy_elsewhere=lambda: 0.0))
    assert limited == {1}
    assert torch.get_num_threads() == before
