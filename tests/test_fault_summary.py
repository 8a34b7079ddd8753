"""The fault table (tests/faults/summary.py) reaches the run's summary whether the tests run in one process or in
several (pytest-xdist): a small suite of fault cases, run by a fresh pytest both ways, prints what each recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.packaging.helpers import ROOT

CASES = textwrap.dedent("""
    from tests.faults.summary import SEEN_PROPERTY

    def test_one(request):
        request.node.user_properties.append((SEEN_PROPERTY, ("inputs", "first case", "The recipe has a problem")))

    def test_two(request):
        request.node.user_properties.append((SEEN_PROPERTY, ("outputs", "second case", "Nothing was left behind")))
        assert False, "fails on purpose"

    def test_quiet():
        pass
""")


@pytest.mark.parametrize("processes", ["0", "2"])
def test_every_case_reaches_the_table(tmp_path, processes):
    (tmp_path / "tests" / "faults").mkdir(parents=True)
    (tmp_path / "tests" / "faults" / "test_inputs.py").write_text(CASES)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.faults.summary", "-p", "no:cacheprovider", "-n", processes,
         "tests"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MERGESMITH_RELIABILITY_DOC": ""},
    )
    table = done.stdout.partition("fault injection: what the user saw")[2]
    assert "Cases tried: 3, passed: 2, failed: 1" in table, done.stdout[-3000:]
    assert "| inputs | first case | passed | The recipe has a problem |" in table
    assert "| outputs | second case | FAILED | Nothing was left behind |" in table
    assert "| inputs | test_quiet | passed | (no message) |" in table
