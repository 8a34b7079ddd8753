"""Fixtures made once per test process and shared by every test folder: the machine's probe and the window's
sample models. Registered by tests/conftest.py alone: a fixture imported into several conftests is made once per
conftest, so a process running the window, fault, system and Try tests ran the probe child four times and wrote
the medium models twice.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from pathlib import Path

import pytest

from guiapp.engine.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.system.probe import ProbeResult, machine_fingerprint, probe_child_command, run_probe_child

SMALL = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=256)
WIDER = dataclasses.replace(SMALL, intermediate=192)
# Big enough that a merge takes a second or more here, so progress is seen moving and a cancel lands mid-job.
MEDIUM = LlamaShape(hidden=512, intermediate=1536, layers=6, heads=8, kv_heads=4, vocab=4096)


class Models:
    """The window tests' sample models, each written on first use: the three medium ones (~280 MB, seconds of
    CPU) only in a process that runs a test that needs them. Read-only: a test that changes a model copies it."""

    def __init__(self, root: Path) -> None:
        self._root = root

    @cached_property
    def base(self) -> Path:
        return write_llama(self._root / "base", SMALL, seed=0)

    @cached_property
    def tune_a(self) -> Path:
        return write_llama_finetune(self._root / "tune-a", self.base, seed=1)

    @cached_property
    def tune_b(self) -> Path:
        return write_llama_finetune(self._root / "tune-b", self.base, seed=2)

    @cached_property
    def wider(self) -> Path:
        return write_llama(self._root / "wider", WIDER, seed=3)

    @cached_property
    def medium_base(self) -> Path:
        return write_llama(self._root / "medium-base", MEDIUM, seed=10)

    @cached_property
    def medium_a(self) -> Path:
        return write_llama_finetune(self._root / "medium-a", self.medium_base, seed=11, delta_rank=None)

    @cached_property
    def medium_b(self) -> Path:
        return write_llama_finetune(self._root / "medium-b", self.medium_base, seed=12, delta_rank=None)


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    return Models(tmp_path_factory.mktemp("ui-models"))


@pytest.fixture(scope="session")
def probed() -> ProbeResult:
    """This machine's real capability probe, run once per test process (a child process, ~10 s on a busy core)."""
    result = run_probe_child(probe_child_command(), machine_fingerprint(), timeout=180)
    assert result.problem is None, result.problem
    return result
