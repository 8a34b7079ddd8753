"""Time from process start to the Mergesmith window being shown (target ≤ 1.5 s).

    python benchmarks/startup.py [--runs 5]

Each run starts a fresh Python process that opens the window the way `mergesmith` does (offscreen unless a
display is there) and reports, on the first event-loop turn after `show()`, how long ago its process started
(from the OS's process start time, so interpreter start-up and every import count). It also checks that torch
was not imported on the way. Prints each run, then the median and the worst.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import time, os, sys, psutil
from PySide6.QtCore import QTimer
from guiapp.ui.app import create_window
app, window = create_window([])
window.show()
def shown():
    started = psutil.Process(os.getpid()).create_time()
    print(f"{time.time() - started:.3f} {'torch' in sys.modules}", flush=True)
    app.quit()
QTimer.singleShot(0, shown)
app.exec()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = dict(os.environ)
    if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
    times = []
    with tempfile.TemporaryDirectory() as config:
        env["MERGESMITH_CONFIG_DIR"] = config
        for run in range(1, args.runs + 1):
            done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=60)
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return 1
            seconds, torch_loaded = done.stdout.split()
            times.append(float(seconds))
            print(f"run {run}: window shown {float(seconds):.3f} s after process start"
                  + (" (torch was imported!)" if torch_loaded == "True" else ""))
    print(f"median {statistics.median(times):.3f} s, worst {max(times):.3f} s (target ≤ 1.5 s)")
    return 0 if max(times) <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
