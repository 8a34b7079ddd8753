"""Starting the window: no torch on the way to a visible window. (`mergesmith --self-test` passing, without a
display, is tests/system/test_display_libraries.py's.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The windows these programs open probe the machine as they load: they find the run's probe in their cache, as on
# a second start (tests/system/test_probe.py runs the probe itself).
pytestmark = pytest.mark.usefixtures("probe_in_cache")

SHOW_WINDOW = """
import sys
from guiapp.ui.app import create_window
app, window = create_window([])
window.show()
app.processEvents()
heavy = sorted(name for name in ("torch", "numpy", "safetensors", "guiapp.merging.methods") if name in sys.modules)
print("visible" if window.isVisible() else "hidden", ",".join(heavy) or "-")
"""


def _run_offscreen(script: str, config: Path, timeout: float) -> subprocess.CompletedProcess:
    """`script` in a new Python process, as a fresh start of the app: offscreen, with its own config folder."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MERGESMITH_CONFIG_DIR": str(config)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done


def test_showing_the_window_does_not_import_torch(tmp_path):
    done = _run_offscreen(SHOW_WINDOW, tmp_path, timeout=60)
    assert done.stdout.split() == ["visible", "-"], done.stdout


MERGE_PAGE_BEFORE_TORCH = """
import sys
from guiapp.ui.app import create_window
app, window = create_window([])
window.show()
app.processEvents()
page = window.merge
page.method_box.select("della")
page.add_model("org/a")
page.add_model("org/b")
app.processEvents()
heavy = sorted(name for name in ("torch", "numpy", "safetensors", "guiapp.merging.methods") if name in sys.modules)
print(page.stack.currentWidget() is not page.loading, page.method_combo.currentData(),
      ",".join(sorted(page.param_form.editors)), "density" in page.recipe.yaml(), page.run_button.isEnabled(),
      ",".join(heavy) or "-")
"""


def test_the_merge_page_is_ready_for_input_before_torch_has_loaded(tmp_path):
    # Built from the methods' declarations: choosing a method, its parameters and models needs no merge engine;
    # only the check (and so Run) waits for it.
    done = _run_offscreen(MERGE_PAGE_BEFORE_TORCH, tmp_path, timeout=60)
    assert done.stdout.split() == ["True", "della", "int8_mask,lambda,normalize,rescale", "True", "False", "-"], \
        done.stdout


RUN_APP = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from guiapp.ui.app import run_app
app = QApplication([])
QTimer.singleShot(1500, QApplication.closeAllWindows)  # as if the user closed the window
code = run_app([])
print("exit", code, "torch" in sys.modules)
"""


@pytest.mark.long
def test_the_app_runs_on_the_qasync_loop_and_exits_when_closed(tmp_path):
    done = _run_offscreen(RUN_APP, tmp_path, timeout=120)
    assert done.stdout.split() == ["exit", "0", "True"], done.stdout  # torch came in the background meanwhile
    # Quitting with checks still running printed "Error in sys.excepthook … (_SimpleTimer) already deleted".
    assert "Traceback" not in done.stderr, done.stderr


LOAD_CHARTS = """
import gc, sys, threading, time
threads = []
sys.addaudithook(lambda event, args: event == "import" and args[0] == "pyqtgraph" and not threads
                 and threads.append(threading.current_thread() is threading.main_thread()))
from guiapp.ui.app import create_window
from guiapp.ui.widgets.charts import ChartHost
app, window = create_window([])
window.show()
window.state.start_loading(probe=False)
deadline = time.monotonic() + 300
while time.monotonic() < deadline and not (window.state.methods is not None and "pyqtgraph" in sys.modules
                                           and all(chart.plot is not None for chart in window.findChildren(ChartHost))):
    app.processEvents()
    time.sleep(0.01)
print("pyqtgraph" in sys.modules, threads, gc.get_freeze_count() > 100_000)
"""


def test_the_chart_library_loads_on_the_ui_thread_once_the_engine_is_there(tmp_path):
    # pyqtgraph reads every class of QtCore, QtGui and QtWidgets when imported, which makes PySide6 create them;
    # done on a worker thread while the window ran, it crashed the process (a segmentation fault, seen with a
    # core kept busy). So it is loaded on the UI thread, in steps short enough not to freeze the window, and the
    # charts' plots are made before any job needs one. The engine's objects (torch's, some 200,000) are kept out
    # of the garbage collector's full passes, which took the UI thread about 90 ms each.
    done = _run_offscreen(LOAD_CHARTS, tmp_path, timeout=600)
    assert done.stdout.split() == ["True", "[True]", "True"], done.stdout


BUILD_WINDOW = """
import sys
from guiapp.ui.app import create_window
app, window = create_window([])
print("huggingface_hub.utils._http" in sys.modules)
"""


def test_building_the_window_does_not_load_the_hub_client(tmp_path):
    # Showing the Hub's address on the Settings page loaded huggingface_hub's HTTP client (httpx and its errors,
    # about 0.1-0.2 s of a 1.5 s start); it loads with the first request, off the way to the window.
    done = _run_offscreen(BUILD_WINDOW, tmp_path, timeout=60)
    assert done.stdout.split() == ["False"], done.stdout


REAL_ENTRY = """
import atexit, sys
from pathlib import Path
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([])
atexit.register(lambda: Path(sys.argv[1]).write_text("exit handlers ran"))
QTimer.singleShot(1500, QApplication.closeAllWindows)  # as if the user closed the window
from guiapp.__main__ import main
sys.exit(main([]))
"""


def test_closing_the_window_ends_the_process_with_settings_saved_and_exit_handlers_run(tmp_path):
    """`mergesmith` ends its process itself once the window is closed (the interpreter's teardown of torch and
    Qt took seconds), after the settings are written and the exit handlers have run."""
    marker = tmp_path / "marker"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MERGESMITH_CONFIG_DIR": str(tmp_path / "config"),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", REAL_ENTRY, str(marker)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "exit handlers ran"
    saved = list((tmp_path / "xdg").rglob("Mergesmith*.conf"))
    assert saved and "window" in saved[0].read_text(), saved  # closeEvent's settings reached the disk


FIRST_START = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from guiapp.ui.app import run_app
from guiapp.ui.single_instance import SingleInstance
app = QApplication([])

def listening():
    server = next((w.findChild(SingleInstance) for w in QApplication.topLevelWidgets() if w.findChild(SingleInstance)),
                  None)
    if server is None:
        return QTimer.singleShot(20, listening)
    server.activated.connect(lambda: (print("brought to the front", flush=True), QApplication.closeAllWindows()))
    print("listening", flush=True)

QTimer.singleShot(0, listening)
QTimer.singleShot(60_000, QApplication.closeAllWindows)  # in case the second start never arrives
print("exit", run_app([]), flush=True)
"""


def test_a_second_start_brings_the_open_window_to_the_front_instead_of_opening_another(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MERGESMITH_CONFIG_DIR": str(tmp_path / "config")}
    first = subprocess.Popen([sys.executable, "-c", FIRST_START], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert first.stdout.readline().strip() == "listening", first.stderr.read()
        second = subprocess.run([sys.executable, "-m", "guiapp"], capture_output=True, text=True, env=env, timeout=60)
        assert second.returncode == 0, second.stderr
        assert "already open" in second.stdout
        assert first.stdout.readline().strip() == "brought to the front"
        assert first.stdout.readline().strip() == "exit 0"
    finally:
        first.kill()
        first.wait()
