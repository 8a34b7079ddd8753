"""The fault suite's shared parts: sample models, the `seen` recorder and the end-of-session summary table.

Each case calls `seen(fault_class, case, explanation_or_text)`; the test's outcome decides whether the case
passed. At the end of the session `pytest_terminal_summary` prints the table of cases tried and passed and, per
fault class, what the user saw. With MERGESMITH_RELIABILITY_DOC=docs/reliability.md set, the table is also
written into that file between its two markers (see docs/reliability.md for the command).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from guiapp.engine.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.system.explain import Explanation
from tests.faults.harness import Seen, headline
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - the Hub cases use them
from tests.support.warm_cli import WarmCli
from tests.ui.conftest import models, probed  # noqa: F401 - here, not per module: pytest makes one per module

SMALL = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=256)
FAULT_CLASSES = {"test_inputs": "inputs", "test_environment": "environment", "test_process": "process",
                 "test_security": "security", "test_load": "load", "test_outputs": "outputs",
                 "test_hostile_hub": "hostile hub", "test_messages": "messages"}  # fmt: skip
BEGIN, END = "<!-- fault-summary:begin -->", "<!-- fault-summary:end -->"

_SEEN: list[Seen] = []
_OUTCOMES: dict[str, bool | None] = {}  # a test's outcome: passed, failed, None = skipped
_SECONDS: list[float] = [0.0]  # time spent in fault cases (setup, call, teardown), whatever else the run holds


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


@pytest.fixture(scope="session")
def warm_cli() -> Iterator[WarmCli]:
    """`mergesmith ARGS` in a fresh (forked) process per case, torch imported once: `warm_cli.run(args, ...)`."""
    with WarmCli() as cli:
        yield cli


@pytest.fixture
def seen(request: pytest.FixtureRequest):
    """Record what the user saw for a case: `seen(fault_class, case, explanation or text)`."""

    def record(fault_class: str, case: str, saw: Explanation | str) -> None:
        text = headline(saw) if isinstance(saw, Explanation) else saw
        text = re.sub(r"(?<![\w.])(?:/[\w.+@-]+)+/([\w.+@-]+)", r"\1", text)  # a path by its last name
        _SEEN.append(Seen(fault_class, case, " ".join(text.split()), request.node.nodeid))

    return record


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    _SECONDS[0] += report.duration
    if report.failed:
        _OUTCOMES[item.nodeid] = False
    elif report.skipped:
        _OUTCOMES.setdefault(item.nodeid, None)  # neither passed nor failed
    elif report.when == "call":
        _OUTCOMES.setdefault(item.nodeid, True)


def _rows() -> list[Seen]:
    rows = []
    recorded = {row.nodeid for row in _SEEN}
    for row in _SEEN:
        row.passed = _OUTCOMES.get(row.nodeid)
        rows.append(row)
    for nodeid, passed in _OUTCOMES.items():
        if nodeid not in recorded:  # a case that failed (or was skipped) before the user saw anything
            module = nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
            saw = "(skipped)" if passed is None else "(failed before any message)"
            rows.append(Seen(FAULT_CLASSES.get(module, module), nodeid.split("::")[-1], saw, nodeid, passed))
    order = list(FAULT_CLASSES.values())
    return sorted(rows, key=lambda r: (order.index(r.fault_class) if r.fault_class in order else 99, r.nodeid))


def summary_table(rows: list[Seen], seconds: float) -> str:
    """The Markdown summary: totals, then per fault class each case, its result and what the user saw."""
    tried = len(rows)
    passed = sum(1 for r in rows if r.passed)
    lines = [f"Cases tried: {tried}, passed: {passed}, failed: {sum(1 for r in rows if r.passed is False)}, "
             f"skipped: {sum(1 for r in rows if r.passed is None)} ({seconds:.0f} s).", ""]
    lines += ["| fault class | tried | passed |", "|---|---|---|"]
    for fault_class in dict.fromkeys(r.fault_class for r in rows):
        group = [r for r in rows if r.fault_class == fault_class]
        lines.append(f"| {fault_class} | {len(group)} | {sum(1 for r in group if r.passed)} |")
    lines += ["", "| fault class | case | result | what the user saw (title: first line) |", "|---|---|---|---|"]
    for r in rows:
        result = {True: "passed", False: "FAILED", None: "skipped"}[r.passed]
        lines.append(f"| {r.fault_class} | {r.case} | {result} | {r.saw.replace('|', '/')} |")
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    rows = _rows()
    if not rows:
        return
    table = summary_table(rows, _SECONDS[0])
    terminalreporter.section("fault injection: what the user saw")
    terminalreporter.write_line(table)
    target = os.environ.get("MERGESMITH_RELIABILITY_DOC")
    if target:
        path = Path(target)
        text = path.read_text(encoding="utf-8")
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        path.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}", encoding="utf-8")
        terminalreporter.write_line(f"(written into {path})")
