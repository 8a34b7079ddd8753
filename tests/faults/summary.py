"""The fault suite's end-of-run table: each case, its result and what the user saw.

A plugin loaded by tests/conftest.py, so that it runs in the process that prints the run's summary: with several
test processes (pytest-xdist) that one collects no tests itself and gets each test's report, whose user
properties carry what `seen` recorded. With MERGESMITH_RELIABILITY_DOC=docs/reliability.md set, the table is also
written into that file between its two markers (see docs/reliability.md for the command).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults.harness import Seen

FAULT_CLASSES = {"test_inputs": "inputs", "test_environment": "environment", "test_process": "process",
                 "test_security": "security", "test_load": "load", "test_outputs": "outputs",
                 "test_hostile_hub": "hostile hub", "test_messages": "messages"}  # fmt: skip
BEGIN, END = "<!-- fault-summary:begin -->", "<!-- fault-summary:end -->"
SEEN_PROPERTY = "fault-seen"  # a user property: (fault class, case, what the user saw)
FAULT_TESTS = "tests/faults/"

_SEEN: list[Seen] = []
_OUTCOMES: dict[str, bool | None] = {}  # a test's outcome: passed, failed, None = skipped
_SECONDS: list[float] = [0.0]  # time spent in fault cases (setup, call, teardown), whatever else the run holds


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.nodeid.startswith(FAULT_TESTS):
        return
    _SECONDS[0] += report.duration
    if report.failed:
        _OUTCOMES[report.nodeid] = False
    elif report.skipped:
        _OUTCOMES.setdefault(report.nodeid, None)  # neither passed nor failed
    elif report.when == "call":
        _OUTCOMES.setdefault(report.nodeid, True)
    if report.when == "teardown":  # its report carries every property the test added
        _SEEN.extend(Seen(*value, report.nodeid) for name, value in report.user_properties if name == SEEN_PROPERTY)


def _rows() -> list[Seen]:
    rows = []
    recorded = {row.nodeid for row in _SEEN}
    for row in _SEEN:
        row.passed = _OUTCOMES.get(row.nodeid)
        rows.append(row)
    for nodeid, passed in _OUTCOMES.items():
        if nodeid not in recorded:  # a case that shows the user no message, or failed before it could
            module = nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
            saw = {None: "(skipped)", False: "(failed before any message)", True: "(no message)"}[passed]
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
    if hasattr(config, "workerinput"):  # a pytest-xdist test process: the controlling one prints the table
        return
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
