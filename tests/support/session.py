"""What the tests make once per run and share: the machine's probe and the window's sample models.

The fixtures are registered by tests/conftest.py alone: a fixture imported into several conftests is made once per
conftest, so a process running the window, fault, system and Try tests ran the probe child four times. Their
results are kept in the run's folder ($MERGESMITH_TEST_RUN_DIR, made by tests/conftest.py), under a file lock, so
the first test process to need one makes it and the others (pytest-xdist's workers, a pytest child a test starts)
read it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.system.probe import (
    ProbeResult,
    cache_file,
    load_cached,
    machine_fingerprint,
    probe_child_command,
    run_probe_child,
    store,
)

SMALL = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=256)
WIDER = dataclasses.replace(SMALL, intermediate=192)
# Big enough that a merge takes a second or more here, so progress is seen moving and a cancel lands mid-job.
MEDIUM = LlamaShape(hidden=512, intermediate=1536, layers=6, heads=8, kv_heads=4, vocab=4096)


def run_folder() -> Path:
    """The folder this test run's processes share (see tests/conftest.py)."""
    return Path(os.environ["MERGESMITH_TEST_RUN_DIR"])


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """Hold the run-wide lock `name`: another test process making the same thing waits until it is made."""
    with (run_folder() / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def made_once(folder: Path, make: Callable[[Path], object]) -> Path:
    """`folder`, made by `make(folder)` if no test process of this run made it yet. A half-made folder (a process
    killed while making it) is never taken: `make` writes to a temporary name, renamed when complete."""
    with _locked(folder.name):
        if not folder.is_dir():
            partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            make(partial)
            partial.rename(folder)
    return folder


@dataclass(frozen=True)
class Models:
    """The window tests' sample models (read-only: a test that changes a model copies it). All seven are the only
    folders in their parent folder: a test adds that folder and counts them."""

    base: Path
    tune_a: Path
    tune_b: Path
    wider: Path
    medium_base: Path
    medium_a: Path
    medium_b: Path


def _write_models(root: Path) -> None:
    base = write_llama(root / "base", SMALL, seed=0)
    write_llama_finetune(root / "tune-a", base, seed=1)
    write_llama_finetune(root / "tune-b", base, seed=2)
    write_llama(root / "wider", WIDER, seed=3)
    medium_base = write_llama(root / "medium-base", MEDIUM, seed=10)
    write_llama_finetune(root / "medium-a", medium_base, seed=11, delta_rank=None)
    write_llama_finetune(root / "medium-b", medium_base, seed=12, delta_rank=None)


@pytest.fixture(scope="session")
def models() -> Models:
    """Written once per run (~3 s CPU and 300 MB, most of it the three medium models) by the first process that
    needs them."""
    root = made_once(run_folder() / "ui-models", _write_models)
    return Models(*(root / name for name in ("base", "tune-a", "tune-b", "wider", "medium-base", "medium-a",
                                             "medium-b")))


@pytest.fixture(scope="session")
def probed() -> ProbeResult:
    """This machine's real capability probe: the probe child (~3.5 s CPU, ~10 s on a busy core) runs once per run."""
    fingerprint = machine_fingerprint()
    shared = run_folder() / "probe.json"
    with _locked("probe"):
        result = load_cached(shared, fingerprint)
        if result is None:
            result = run_probe_child(probe_child_command(), fingerprint, timeout=180)
            assert result.problem is None, result.problem
            store(result, shared)
    return result


@pytest.fixture(scope="session")
def probe_in_cache(probed: ProbeResult) -> ProbeResult:
    """The run's probe, also stored in this process's cache folder ($MERGESMITH_CACHE_DIR, which the programs a
    test starts inherit): `probe()` there finds it as on a second start, instead of running the probe child (~3.5 s
    CPU) once more per test process. tests/system/test_probe.py runs the probe fresh."""
    store(probed, cache_file(machine_fingerprint()))
    return probed
