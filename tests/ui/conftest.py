"""The window under test: real widgets (offscreen), the real engine on small generated models, the real probe.

Each test gets its own config folder (jobs history) and QSettings file, so nothing leaks between tests or into
the user's settings. The window loads the real method registry (torch) but is handed the probe result made
once per session, so tests do not each run the probe child.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QSettings
from PySide6.QtWidgets import QApplication

from guiapp.system.probe import Check, ProbeResult
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - fixtures for the search tests


@pytest.fixture(scope="session")
def chart_shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the chart tests save their screenshots for a person to look at: $MERGESMITH_CHART_SHOTS, else a folder
    of this run's pytest temporary tree (pytest keeps the last three runs' and removes older ones)."""
    chosen = os.environ.get("MERGESMITH_CHART_SHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("charts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(tmp_path / "config"))
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path / "qsettings"))
    QSettings().clear()


@pytest.fixture
def make_window(qtbot, probed):
    """Builds the main window like `run_app` does, methods loaded, with the session's probe (or `probe`)."""
    from guiapp.ui.app import create_window

    windows = []

    def make(probe: ProbeResult | None = None):
        # The previous test's window is closed and marked for deletion, which Qt does at its next event loop: here,
        # before this window is built, or it would still be alive (~1,800 widgets) while this one is built and
        # styled, and every style sheet set now would repolish it too.
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        _, window = create_window([])
        qtbot.addWidget(window)
        window.resize(1280, 860)
        window.show()
        window.state.start_loading(probe=False)
        qtbot.waitUntil(lambda: window.state.methods is not None, timeout=60_000)
        window.state.set_probe(probe or probed)
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.state.jobs.shutdown(10)


@pytest.fixture
def window(make_window):
    return make_window()


def broken_float16(result: ProbeResult) -> ProbeResult:
    """The probe of a machine whose CPU cannot convert float16 (as some torch builds cannot)."""
    checks = [dataclasses.replace(c, ok=False, error="RuntimeError: \"copy_\" not implemented for 'Half'")
              if (c.device, c.dtype) == ("cpu", "float16") and c.operation.startswith("cast_to_") else c
              for c in result.checks]
    return dataclasses.replace(result, checks=checks)


def with_gpu(result: ProbeResult, device: str = "cuda:0") -> ProbeResult:
    """The probe of this machine plus a GPU `device` that passed every check: a machine this one is not."""
    gpu = {"id": device, "kind": "cuda", "name": "Test GPU", "memory_total": 8_000_000_000,
           "memory_free": 7_000_000_000}
    checks = result.checks + [Check(device, c.dtype, c.operation, c.ok, c.error) for c in result.checks
                              if c.device == "cpu"]
    speeds = result.speeds + [dataclasses.replace(s, device=device) for s in result.speeds if s.device == "cpu"]
    return dataclasses.replace(result, devices=result.devices + [gpu], checks=checks, speeds=speeds)


def wait_for_job(qtbot, window, key: str, timeout: int = 60_000):
    record = window.state.jobs.record(key)
    qtbot.waitUntil(lambda: not record.status.active, timeout=timeout)
    return record
