"""The memory a child process used, for tests that check the merge's memory and its estimate."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MemoryRun:
    peak_private: int  # the largest anonymous resident memory (RssAnon) seen while sampling every 2 ms
    stdout: str


def run_measuring_memory(command: list[str]) -> MemoryRun:
    """Run `command` to its end and return its peak private memory, sampled from /proc, and its output; fails the
    test if it exits non-zero. Sampling can miss a short spike on a loaded machine: a test comparing two runs
    exactly has the child print its own high-water mark instead (resource.getrusage(RUSAGE_SELF).ru_maxrss)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status = Path(f"/proc/{process.pid}/status")
    peak = 0
    while process.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            pass
        time.sleep(0.002)
    out, err = process.communicate()
    assert process.returncode == 0, err
    return MemoryRun(peak, out)
