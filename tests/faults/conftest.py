"""The fault suite's shared parts: sample models and the `seen` recorder.

Each case calls `seen(fault_class, case, explanation_or_text)`; the test's outcome decides whether the case
passed. At the end of the run tests/faults/summary.py prints the table of cases tried and passed and, per fault
class, what the user saw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.system.explain import Explanation
from tests.faults.harness import headline
from tests.faults.summary import SEEN_PROPERTY
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - the Hub cases use them
from tests.support.warm_cli import warm_cli  # noqa: F401 - the CLI cases use it

SMALL = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=256)


@dataclass(frozen=True)
class Trio:
    base: Path
    one: Path
    two: Path


@pytest.fixture(scope="session")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Trio:
    """A small float32 base and two fine-tunes of it, shared read-only by the cases."""
    root = tmp_path_factory.mktemp("fault-models")
    base = write_llama(root / "base", SMALL, dtype=torch.float32, seed=0)
    return Trio(base, write_llama_finetune(root / "one", base, seed=1, delta_rank=None),
                write_llama_finetune(root / "two", base, seed=2, delta_rank=None))


@pytest.fixture
def seen(request: pytest.FixtureRequest):
    """Record what the user saw for a case: `seen(fault_class, case, explanation or text)`."""

    def record(fault_class: str, case: str, saw: Explanation | str) -> None:
        text = headline(saw) if isinstance(saw, Explanation) else saw
        text = re.sub(r"(?<![\w.])(?:/[\w.+@-]+)+/([\w.+@-]+)", r"\1", text)  # a path by its last name
        # On the test's report, which reaches the process that prints the summary (tests/faults/summary.py).
        request.node.user_properties.append((SEEN_PROPERTY, (fault_class, case, " ".join(text.split()))))

    return record
