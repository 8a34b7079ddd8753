"""Start and quit as the user sees them: the window shown (target ≤ 1.5 s), the Merge page ready for input, and the
process gone after the window is closed (target ≤ 1 s).

    python benchmarks/startup.py [--runs 5] [--busy]

Each run starts `mergesmith` (its real entry, `guiapp.__main__.main`) in a fresh Python process, offscreen unless a
display is there. The child says when the window is first shown (the first event-loop turn after `show()`), when
the Merge page is ready for input (its form shown with the methods listed and a method's parameters), when the
merge engine (torch) has loaded in the background, then closes the window as a user would; the times are
measured here, from just before starting the process, and the exit time from the child's "closing" line to the
process's end, so interpreter start-up, every import and the whole teardown count. `--busy` runs a process that
keeps one core busy meanwhile. Prints each run, then the median and the worst of each.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CHILD = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([])

def window():
    return next((w for w in QApplication.topLevelWidgets() if type(w).__name__ == "MainWindow"), None)

def watch():
    main = window()
    if main is None or not main.isVisible():
        return QTimer.singleShot(0, watch)
    print(f"shown {'torch' in sys.modules}", flush=True)
    QTimer.singleShot(0, wait_for_page)

def wait_for_page():
    page = window().merge
    if page.stack.currentWidget() is page.loading or not page.method_combo.count() or page.method_box.method() is None:
        return QTimer.singleShot(20, wait_for_page)
    print("ready", flush=True)
    wait_for_engine()

def wait_for_engine():
    if window().state.methods is None:
        return QTimer.singleShot(20, wait_for_engine)
    print("engine", flush=True)
    QTimer.singleShot(500, close)

def close():
    print("closing", flush=True)
    window().close()

QTimer.singleShot(0, watch)
from guiapp.__main__ import main
sys.exit(main([]))
"""


def _spin() -> None:
    while True:
        pass


def _one_run(env: dict) -> tuple[float, float, float, float, bool]:
    """(shown, Merge page ready, engine loaded, exit) seconds for one start, and whether torch was imported before
    the window showed."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=env)
    lines: dict[str, tuple[float, str]] = {}

    def read() -> None:
        for line in child.stdout:
            lines[line.split()[0]] = (time.perf_counter(), line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while child.poll() is None:
        time.sleep(0.002)
    ended = time.perf_counter()
    reader.join(5)
    if not {"shown", "ready", "engine", "closing"} <= lines.keys() or child.returncode != 0:
        raise SystemExit(f"the child did not start and close cleanly (exit {child.returncode}): {sorted(lines)}")
    return (lines["shown"][0] - started, lines["ready"][0] - started, lines["engine"][0] - started,
            ended - lines["closing"][0], lines["shown"][1].split()[1] == "True")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy", action="store_true", help="keep one core busy with another process meanwhile")
    args = parser.parse_args()
    env = dict(os.environ)
    if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
    spinner = multiprocessing.Process(target=_spin, daemon=True) if args.busy else None
    if spinner:
        spinner.start()
    shown, ready, engine, exits = [], [], [], []
    try:
        with tempfile.TemporaryDirectory() as config:
            env["MERGESMITH_CONFIG_DIR"] = config
            for run in range(1, args.runs + 1):
                show, usable, loaded, gone, torch_early = _one_run(env)
                shown.append(show)
                ready.append(usable)
                engine.append(loaded)
                exits.append(gone)
                print(f"run {run}: window shown {show:.3f} s, Merge page ready {usable:.3f} s, engine loaded "
                      f"{loaded:.3f} s, process gone {gone:.3f} s after closing"
                      + (" (torch was imported before the window!)" if torch_early else ""))
    finally:
        if spinner:
            spinner.terminate()
    condition = "one core busy" if args.busy else "quiet"
    for name, times, target in (("window shown", shown, 1.5), ("Merge page ready", ready, 3.0 if args.busy else 1.5),
                                ("exit after closing", exits, 1.0)):
        print(f"{name} ({condition}): median {statistics.median(times):.3f} s, worst {max(times):.3f} s "
              f"(target ≤ {target} s; worst/target {max(times) / target:.2f})")
    print(f"merge engine loaded (checks and estimates from then on): median {statistics.median(engine):.3f} s, "
          f"worst {max(engine):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
