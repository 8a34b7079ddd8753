"""The `mergesmith` entry point itself: version, usage errors, and a window that cannot open."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "guiapp", *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_version_and_usage():
    version = _run("--version")
    assert version.returncode == 0 and version.stdout.startswith("mergesmith ")
    assert _run("no-such-command").returncode == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the display check is Linux's")
def test_without_a_display_the_window_explains_instead_of_crashing():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    result = _run(env=env)
    assert result.returncode == 1
    assert "needs a desktop session" in result.stderr and "mergesmith --help" in result.stderr
