"""Progress reporting and cooperative cancellation, shared by every layer (engine, hub, jobs).

Long operations take a `Progress` and call `progress.step(...)` between units of work (tensors, chunks);
`step` raises `JobCancelled` once the user has cancelled, so cancellation takes effect between tensors.
Listeners (the CLI's progress bar, the window's Qt bridge) receive immutable `ProgressEvent`s.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from guiapp.errors import JobCancelled
from guiapp.system.scrub import scrub


@dataclass(frozen=True)
class ProgressEvent:
    """A snapshot of a job's progress.

    `done`/`total` count units (tensors, files); `bytes_done`/`bytes_total` the data behind them, which drive
    the rate (bytes/s, over the last RATE_WINDOW_SECONDS of work) and the ETA (seconds; None until a rate has
    been measured, so never 0 while work is left). A stage whose time does not follow its bytes (an extraction:
    the decompositions, not the reads, take the time) also counts `work_done`/`work_total` in its own units:
    then the fraction and the ETA follow the work, and the rate still says bytes per second.
    """

    stage: str
    done: int
    total: int
    bytes_done: int
    bytes_total: int
    item: str
    elapsed: float
    rate: float | None
    eta: float | None
    work_done: float = 0.0
    work_total: float = 0.0

    @property
    def fraction(self) -> float:
        if self.work_total > 0:
            return min(1.0, self.work_done / self.work_total)
        if self.bytes_total > 0:
            return min(1.0, self.bytes_done / self.bytes_total)
        return min(1.0, self.done / self.total) if self.total else 0.0


ProgressListener = Callable[[ProgressEvent], None]
LogListener = Callable[[str], None]


class CancelToken:
    """Set from any thread to ask a running job to stop at its next step."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise JobCancelled()


@dataclass(frozen=True)
class PausePoint:
    """Where to hold a job once: after step `step` of stage `stage` ("Merging", 2: after the second tensor), until
    the file `release` exists or the job is cancelled; so that whoever runs the job (a test, through the CLI) acts on
    it mid-stage at a point it controls however fast or loaded the machine is."""

    stage: str
    step: int
    release: str


class Progress:
    """Tracks one job's progress and forwards events and log lines to its listeners.

    All arguments are optional so that engine functions can be called without any reporting. `pause_at` holds the
    job once at that point, logging a line first.
    """

    def __init__(
        self,
        on_event: ProgressListener | None = None,
        on_log: LogListener | None = None,
        cancel: CancelToken | None = None,
        pause_at: PausePoint | None = None,
    ) -> None:
        self._on_event = on_event
        self._on_log = on_log
        self.cancel_token = cancel or CancelToken()
        self._start = time.monotonic()
        self._stage = ""
        self._part = ""
        self._total = 0
        self._bytes_total = 0
        self._done = 0
        self._bytes_done = 0
        self._stage_start = self._start
        # (time, bytes done by work that measures speed, work done likewise)
        self._rate_samples: deque[tuple[float, int, float]] = deque()
        self._measured_bytes = 0
        self._work_total = self._work_done = self._measured_work = 0.0
        self._work_origin: tuple[float, float] | None = None  # (time, work done) where the work rate starts
        self._pause_at = pause_at

    def start_stage(self, stage: str, total: int = 0, bytes_total: int = 0, work_total: float = 0.0) -> None:
        """Begin a stage ("Merging", "Downloading"…) of `total` units, `bytes_total` bytes and, when its time does
        not follow its bytes, `work_total` (see ProgressEvent)."""
        self.check_cancelled()
        self._stage, self._total, self._bytes_total, self._work_total = stage, total, bytes_total, work_total
        self._done = self._bytes_done = self._measured_bytes = 0
        self._work_done = self._measured_work = 0.0
        self._work_origin = None
        self._stage_start = time.monotonic()
        self._rate_samples = deque([(self._stage_start, 0, 0.0)])
        self._emit("")

    def set_part(self, part: str) -> None:
        """Name the part of the job the stages from now on belong to ("model 2 of 3"), shown after each stage."""
        self._part = part

    def step(self, item: str = "", units: int = 1, nbytes: int = 0, work: float = 0.0) -> None:
        """Record `units` units, `nbytes` bytes and `work` done (item: what was just processed), then check
        cancel."""
        if work and not self._work_done:
            # The first piece of work carries the stage's warm-up (the first reads, lazy initialisation: 0.3 s of
            # a 1 s extraction), which the rest does not repeat: the work rate is measured from its end.
            self._work_origin = (time.monotonic(), self._work_done + work)
        self._done += units
        self._bytes_done += nbytes
        self._measured_bytes += nbytes
        self._work_done += work
        self._measured_work += work
        self._emit(item)
        if self._pause_at and self._pause_at.stage == self._stage and self._done >= self._pause_at.step:
            self._pause_until(self._pause_at.release)
        self.check_cancelled()

    def skip(self, item: str = "", units: int = 1, nbytes: int = 0) -> None:
        """Record `units` units and `nbytes` bytes found already done (a file already in the cache): they move
        the counts but not the rate, which measures only work done now. Then check cancel."""
        self._done += units
        self._bytes_done += nbytes
        self._emit(item)
        self.check_cancelled()

    def log(self, line: str) -> None:
        if self._on_log is not None:
            self._on_log(scrub(line))  # a log line may quote a server's answer: no token or password in it

    def check_cancelled(self) -> None:
        self.cancel_token.raise_if_cancelled()

    def _pause_until(self, release: str) -> None:
        self._pause_at = None  # once per job
        self.log(f"Paused after step {self._done} of {self._stage} until {release} exists.")
        while not os.path.exists(release) and not self.cancel_token.cancelled:
            time.sleep(0.02)

    def _emit(self, item: str) -> None:
        if self._on_event is None:
            return
        now = time.monotonic()
        rate = self._recent_rate(now)
        eta = None
        if self._work_total:
            work_rate = self._work_rate(now)
            eta = max(0.0, self._work_total - self._work_done) / work_rate if work_rate else None
        elif rate:
            eta = max(0.0, self._bytes_total - self._bytes_done) / rate if self._bytes_total else None
        elif not self._bytes_total and self._done > 0 and self._total and now > self._stage_start:
            eta = max(0.0, (self._total - self._done) * (now - self._stage_start) / self._done)
        self._on_event(
            ProgressEvent(
                stage=f"{self._stage}, {self._part}" if self._part else self._stage,
                done=self._done,
                total=self._total,
                bytes_done=self._bytes_done,
                bytes_total=self._bytes_total,
                item=item,
                elapsed=now - self._start,
                rate=rate,
                eta=eta,
                work_done=self._work_done,
                work_total=self._work_total,
            )
        )

    def _work_rate(self, now: float) -> float | None:
        """Work per second since the first piece of work ended (over the last RATE_WINDOW_SECONDS once that long
        has passed); None before a second piece."""
        if self._work_origin is None:
            return None
        _, _, work_then = self._rate_samples[0]
        since, origin_work = max((self._rate_samples[0][0], work_then), self._work_origin)
        work = self._measured_work - origin_work
        return work / (now - since) if work > 0 and now > since else None

    def _recent_rate(self, now: float) -> float | None:
        """Bytes per second over the last RATE_WINDOW_SECONDS (since the stage began, until that long has
        passed); None before any byte was measured. Keeps the samples `_work_rate` reads too."""
        samples = self._rate_samples
        samples.append((now, self._measured_bytes, self._measured_work))
        while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW_SECONDS:
            samples.popleft()
        since, measured_then, _ = samples[0]
        measured = self._measured_bytes - measured_then
        return measured / (now - since) if measured > 0 and now > since else None


# How far back the rate looks: long enough to smooth bursts, short enough to follow a connection that slows.
RATE_WINDOW_SECONDS = 10.0
