"""Test-wide set-up: no test touches the user's real folders, the real Hub, or a real screen.

The environment is set here, at import, because huggingface_hub reads its cache and endpoint settings when it
is first imported.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

_SANDBOX = Path(tempfile.mkdtemp(prefix="mergesmith-tests-"))
atexit.register(shutil.rmtree, _SANDBOX, ignore_errors=True)  # each test process's own; 344 had piled up in /tmp
# One folder for the whole run, shared by the test processes (pytest-xdist's workers and the pytest children some
# tests start inherit it): what is made once per run (the probe, the window's sample models) goes there. The
# process that made it removes it when it ends, after the processes it started.
if not os.environ.get("MERGESMITH_TEST_RUN_DIR"):
    os.environ["MERGESMITH_TEST_RUN_DIR"] = tempfile.mkdtemp(prefix="mergesmith-test-run-")
    atexit.register(shutil.rmtree, os.environ["MERGESMITH_TEST_RUN_DIR"], ignore_errors=True)
os.environ["QT_QPA_PLATFORM"] = "offscreen"
os.environ["HF_HOME"] = str(_SANDBOX / "hf-home")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ["MERGESMITH_CONFIG_DIR"] = str(_SANDBOX / "config")
os.environ["MERGESMITH_CACHE_DIR"] = str(_SANDBOX / "cache")
os.environ.pop("HF_TOKEN", None)
os.environ.pop("HUGGING_FACE_HUB_TOKEN", None)

# The fault suite's table, loaded here so that it runs in the process that prints the run's summary, also with
# several test processes (pytest imports it after this module, so with the environment above).
pytest_plugins = ["tests.faults.summary"]

from tests.support.session import models, probe_in_cache, probed  # noqa: E402, F401 - once per process for every folder


def pytest_xdist_auto_num_workers(config) -> int | None:
    """`--numprocesses=auto`: one test process more than this process may run on cores, unless
    PYTEST_XDIST_AUTO_NUM_WORKERS says otherwise. A process is idle while its case waits for what it started (a
    CLI case's forked process, the Hub server's threads, the window's timers); one more process keeps the cores
    busy then (same CPU time, about a tenth less wall time on two cores)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist reads it
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


def pytest_collection_modifyitems(items: list) -> None:
    """Order the files (each runs whole in one test process): those with more slow tests first (the app bundle's
    build takes minutes), so that the other processes run the short ones meanwhile; then those with more long
    ones (cases of several seconds), then the files with more tests before those with fewer, so that the run ends
    on short files instead of one process finishing a long one alone. A file's tests stay together and in their
    order (its module fixtures are made once), except that those on a window shared by the file's tests
    (tests/ui/conftest.py `shared_window`) come after the others: a window built while it is open restyles it
    too (~0.3 s of CPU each). pytest-xdist hands the files out in this order (`--no-loadscope-reorder` in
    pyproject.toml: its own order, by number of tests alone, handed out the bundle's file 42nd of 122 and the
    one-test load case 115th)."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def order(tests: list) -> tuple[int, int, int]:
        return (-sum(test.get_closest_marker("slow") is not None for test in tests),
                -sum(test.get_closest_marker("long") is not None for test in tests), -len(tests))

    items[:] = [item for tests in sorted(files.values(), key=order)
                for item in sorted(tests, key=lambda test: "shared_window" in test.fixturenames)]


@pytest.fixture(autouse=True)
def _garbage_collected_as_the_app_collects_it(request: pytest.FixtureRequest) -> None:
    """Tests with a Qt application collect cyclic garbage as the window does, from a timer on the UI thread
    (guiapp.ui.garbage); the others as the interpreter does, as the command line runs. A test process runs both."""
    if "qapp" in request.fixturenames:
        from guiapp.ui.garbage import collect_garbage_on_ui_thread

        collect_garbage_on_ui_thread(request.getfixturevalue("qapp"))
    elif (collector := _ui_thread_collector()) is not None:
        collector.stop()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item):
    """pytest-qt closes the widgets a test gave it, which it holds by weak references, after the test: it skips
    those Qt has deleted already (children of a widget deleted with the test's variables) whose Python side lives on
    in a reference cycle the collector has not reached yet; closing one raises."""
    if getattr(item, "qt_widgets", None):
        item.qt_widgets = _LiveWidgets(item.qt_widgets)
    return (yield)


class _LiveWidgets(list):
    """pytest-qt's (weak reference, before-close function) pairs, without those whose widget is gone, at the time
    they are gone through."""

    def __iter__(self):
        from shiboken6 import Shiboken

        return (pair for pair in list.__iter__(self) if (widget := pair[0]()) is not None and Shiboken.isValid(widget))


def _ui_thread_collector():
    """The window's garbage collector (guiapp.ui.garbage) if it is collecting in this process, else None."""
    if "guiapp.ui.garbage" not in sys.modules:  # no test of this process had a Qt application
        return None
    from PySide6.QtWidgets import QApplication

    from guiapp.ui.garbage import ui_thread_collector

    app = QApplication.instance()
    collector = ui_thread_collector(app) if app is not None else None
    return collector if collector is not None and collector.active else None
