"""The real capability probe of this machine, run once per test session (a few seconds)."""

from __future__ import annotations

import pytest

from guiapp.system.probe import ProbeResult, machine_fingerprint, probe_child_command, run_probe_child


@pytest.fixture(scope="session")
def probed() -> ProbeResult:
    result = run_probe_child(probe_child_command(), machine_fingerprint(), timeout=120)
    assert result.problem is None, result.problem
    return result
