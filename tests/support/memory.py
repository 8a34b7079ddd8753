"""The memory a child process used, for tests that check the merge's memory and its estimate."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support import warm_cli


@dataclass(frozen=True)
class MemoryRun:
    peak_private: int  # the largest anonymous resident memory (RssAnon) seen while sampling every 2 ms
    stdout: str


def run_measuring_memory(command: list[str]) -> MemoryRun:
    """Run `command` to its end and return its peak private memory, sampled from /proc, and its output; fails the
    test if it exits non-zero. Sampling can miss a short spike on a loaded machine: a test comparing two runs
    exactly has the child print its own high-water mark instead (resource.getrusage(RUSAGE_SELF).ru_maxrss)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = _peak_while(process.pid, lambda: process.poll() is None)
    out, err = process.communicate()
    assert process.returncode == 0, err
    return MemoryRun(peak, out)


def warm_run_measuring_memory(code: str) -> MemoryRun:
    """`python -c CODE` forked from this process's warm CLI (tests/support/warm_cli.py: torch and the merge
    already imported, no start-up to pay), its peak anonymous memory (RssAnon) sampled as `run_measuring_memory`
    does. A fork's RssAnon counts the pages it still shares with the zygote, so its peak means something only next
    to another such run's: for a test of how memory grows, not of its size. Fails the test if the child exits
    non-zero, or ended before its memory could be read once (a peak of 0 would pass any growth check)."""
    ended = threading.Event()
    peaks: list[int] = []
    samplers: list[threading.Thread] = []

    def sample(pid: int) -> None:
        sampler = threading.Thread(target=lambda: peaks.append(_peak_while(pid, lambda: not ended.is_set())))
        sampler.start()
        samplers.append(sampler)

    try:
        done = warm_cli.shared().run([], code=code, timeout=300, started=sample)
    finally:
        ended.set()
        for sampler in samplers:
            sampler.join()
    assert done.returncode == 0, done.stderr
    assert peaks[0] > 0, "the child ended before its memory was read"
    return MemoryRun(peaks[0], done.stdout)


def _peak_while(pid: int, running: Callable[[], bool]) -> int:
    """The largest RssAnon of process `pid`, sampled every 2 ms while `running()` (0 when never read)."""
    status = Path(f"/proc/{pid}/status")
    peak = 0
    while running():
        try:
            for line in status.read_text().splitlines():
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            pass
        time.sleep(0.002)
    return peak
