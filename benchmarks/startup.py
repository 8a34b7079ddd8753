"""Time from process start to the Mergesmith window being shown (target ≤ 1.5 s).

    python benchmarks/startup.py [--runs 5]

Each run starts a fresh Python process that opens the window the way `mergesmith` does (offscreen unless a
display is there) and writes a line on the first event-loop turn after `show()`; the time is measured here, from
just before starting the process to reading that line, so interpreter start-up and every import count. (The
OS's process start time is no use: Linux gives the boot time only to the second.) The child also says whether
torch was imported on the way. Prints each run, then the median and the worst.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = """
import sys
from PySide6.QtCore import QTimer
from guiapp.ui.app import create_window
app, window = create_window([])
window.show()
def shown():
    print(f"shown {'torch' in sys.modules}", flush=True)
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
            started = time.perf_counter()
            child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
            line = child.stdout.readline()
            seconds = time.perf_counter() - started
            child.wait(timeout=60)
            if not line.startswith("shown"):
                print(child.stderr.read(), file=sys.stderr)
                return 1
            times.append(seconds)
            print(f"run {run}: window shown {seconds:.3f} s after starting the process"
                  + (" (torch was imported!)" if line.split()[1] == "True" else ""))
    print(f"median {statistics.median(times):.3f} s, worst {max(times):.3f} s (target ≤ 1.5 s)")
    return 0 if max(times) <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
