"""How many CPU threads each kind of work may use, on a machine that other programs share.

A workstation is busy: a browser, an IDE, a training run, the window itself. OpenMP runtimes spin at the end of
every parallel region waiting for the slowest thread; when one of our threads is descheduled by another program,
the others burn their time slices spinning. Merging memory-bound elementwise blocks with two threads on a busy
2-core machine took seven times the CPU time of one thread. So:

- memory-bound elementwise work (linear, task arithmetic, casts, reads) runs on one thread: a second thread adds
  nothing when memory bandwidth is the limit;
- compute-bound work (matmuls, sorts, quantiles, SVD) uses the cores that are free right now, never more than the
  user's limit;
- waiting threads sleep instead of spinning (`OMP_WAIT_POLICY=PASSIVE`, set by `guiapp/__init__.py` before torch
  loads, because OpenMP reads it only once).

Nothing here imports torch: the job layers apply the numbers with `torch.set_num_threads`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import psutil


class WorkKind(Enum):
    """What limits a piece of work: memory traffic (elementwise) or arithmetic (dense)."""

    ELEMENTWISE = "elementwise"
    DENSE = "dense"


def logical_cores() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one, else all of them)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS and Windows have no affinity masks in os
        return max(1, os.cpu_count() or 1)


_MIN_INTERVAL_S = 0.1


class LoadMeter:
    """Measures how many cores other programs keep busy, from CPU-time counters (no sleeping, no sampling thread).

    Each reading covers the time since the previous one; the first covers at least `first_interval_s`: the time
    since `begin` (work done meanwhile) and a sleep for what is left of it, so the first decision of a job is
    already informed.
    """

    def __init__(self, first_interval_s: float = 0.1) -> None:
        self._process = psutil.Process()
        self._first_interval_s = first_interval_s
        self._last: tuple[float, float, float] | None = None
        self._reading: float | None = None

    def _sample(self) -> tuple[float, float, float]:
        system = psutil.cpu_times()
        # Linux counts guest time inside user time too; iowait is idle time spent waiting for the disk.
        not_busy = ("idle", "iowait", "guest", "guest_nice")
        busy = sum(system) - sum(getattr(system, name, 0.0) for name in not_busy)
        own = self._process.cpu_times()
        return time.monotonic(), busy, own.user + own.system

    def begin(self) -> None:
        """Take the first counter reading now: the first `busy_elsewhere` then covers the work done in between."""
        self._last = self._sample()

    def busy_elsewhere(self) -> float:
        """Cores kept busy by other processes since the last reading (0 when nothing else runs, at most every core
        this process may use). A reading asked for sooner than `_MIN_INTERVAL_S` after the last is that one again:
        the counters advance in ticks (10 ms on Linux), so one tick over a far shorter interval would read as
        dozens of cores."""
        if self._last is None:
            self.begin()
        if self._reading is None:
            left = self._first_interval_s - (time.monotonic() - self._last[0])
            if left > 0:
                time.sleep(left)
        now = self._sample()
        wall = now[0] - self._last[0]
        if wall <= 0 or (self._reading is not None and wall < _MIN_INTERVAL_S):
            return self._reading or 0.0
        others = ((now[1] - self._last[1]) - (now[2] - self._last[2])) / wall
        self._last = now
        self._reading = min(float(logical_cores()), max(0.0, others))
        return self._reading


@dataclass
class ThreadPolicy:
    """Threads per kind of work. `limit` is the user's cap (None: every core this process may use).

    `busy_elsewhere` returns how many cores other programs use; it is read at most once per `refresh_s`.
    """

    limit: int | None = None
    busy_elsewhere: Callable[[], float] = field(default_factory=lambda: LoadMeter().busy_elsewhere)
    refresh_s: float = 1.0
    cores: int = field(default_factory=logical_cores)
    _free: int | None = field(default=None, init=False, repr=False)
    _read_at: float = field(default=float("-inf"), init=False, repr=False)

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"A thread limit must be 1 or more, not {self.limit}.")

    def free_cores(self) -> int:
        """Cores not taken by other programs right now (at least 1), re-measured at most once per refresh_s."""
        now = time.monotonic()
        if self._free is None or now - self._read_at >= self.refresh_s:
            # A core counts as taken when another program keeps it more than half busy.
            self._free = max(1, self.cores - int(self.busy_elsewhere() + 0.5))
            self._read_at = now
        return self._free

    @property
    def most(self) -> int:
        """The most threads any work may use: every core, or the user's limit when lower."""
        return self.cores if self.limit is None else min(self.limit, self.cores)

    def threads_for(self, kind: WorkKind) -> int:
        """The number of threads `kind` of work should use now."""
        if kind is WorkKind.ELEMENTWISE:
            return 1
        return max(1, min(self.most, self.free_cores()))
