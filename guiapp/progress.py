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
from guiapp.facts.wording import each
from guiapp.system.scrub import scrub


@dataclass(frozen=True)
class ProgressEvent:
    """A snapshot of a job's progress.

    `done`/`total` count units (tensors, files); `bytes_done`/`bytes_total` the data behind them, which drive
    the rate (bytes/s, over the last RATE_WINDOW_SECONDS of work) and, unless the stage counts work, the fraction
    and the ETA (seconds, predicted by `TimeLeft`; None until something was measured, so never 0 while work is
    left). A stage whose time does not follow its bytes (an extraction's decompositions, a merge's per-tensor
    cost, a generated token's growing context) also counts `work_done`/`work_total` in its own units of cost: then
    the fraction and the ETA follow the work, and the rate still says bytes per second.
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_event = on_event
        self._on_log = on_log
        self.cancel_token = cancel or CancelToken()
        self._clock = clock  # a test replays a job's timing through it
        self._start = clock()
        self._stage = ""
        self._part = ""
        self._total = 0
        self._bytes_total = 0
        self._done = 0
        self._bytes_done = 0
        self._stage_start = self._start
        # (time, bytes done by work that measures speed): the rate shown
        self._rate_samples: deque[tuple[float, int]] = deque()
        self._measured_bytes = self._measured_units = 0
        self._work_total = self._work_done = self._measured_work = 0.0
        self._time_left = TimeLeft(self._start)
        self._pause_at = pause_at

    def start_stage(self, stage: str, total: int = 0, bytes_total: int = 0, work_total: float = 0.0) -> None:
        """Begin a stage ("Merging", "Downloading"…) of `total` units, `bytes_total` bytes and, when its time does
        not follow its bytes, `work_total` (see ProgressEvent)."""
        self.check_cancelled()
        self._stage, self._total, self._bytes_total, self._work_total = stage, total, bytes_total, work_total
        self._done = self._bytes_done = self._measured_bytes = self._measured_units = 0
        self._work_done = self._measured_work = 0.0
        self._stage_start = self._clock()
        self._rate_samples = deque([(self._stage_start, 0)])
        self._time_left = TimeLeft(self._stage_start)
        self._emit("")

    def set_part(self, part: str) -> None:
        """Name the part of the job the stages from now on belong to ("model 2 of 3"), shown after each stage."""
        self._part = part

    def step(self, item: str = "", units: int = 1, nbytes: int = 0, work: float = 0.0) -> None:
        """Record `units` units, `nbytes` bytes and `work` done (item: what was just processed), then check
        cancel."""
        self._done += units
        self._measured_units += units
        self._bytes_done += nbytes
        self._measured_bytes += nbytes
        self._work_done += work
        self._measured_work += work
        self._time_left.record(self._clock(), self._measured(self._measured_work, self._measured_bytes,
                                                              self._measured_units))
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
        """Send `line` to the job's log; a `Said` keeps its window words, which the window's log shows."""
        if self._on_log is not None:
            self._on_log(each(line, scrub))  # a log line may quote a server's answer: no token or password in it

    def warn(self, text: str) -> None:
        """Log `text` as a warning ("Warning: …"), in each audience's words when it is a `Said`."""
        self.log(each(text, "Warning: {}".format))

    def check_cancelled(self) -> None:
        self.cancel_token.raise_if_cancelled()

    def _pause_until(self, release: str) -> None:
        self._pause_at = None  # once per job
        self.log(f"Paused after step {self._done} of {self._stage} until {release} exists.")
        while not os.path.exists(release) and not self.cancel_token.cancelled:
            time.sleep(0.02)

    def _measured(self, work: float, nbytes: int, units: int) -> float:
        """Of the stage's counts, the one its fraction and time left follow: its work when it counts work, else
        its bytes when it has any, else its units."""
        if self._work_total:
            return work
        return nbytes if self._bytes_total else units

    def _emit(self, item: str) -> None:
        if self._on_event is None:
            return
        now = self._clock()
        rate = self._recent_rate(now)
        total = self._measured(self._work_total, self._bytes_total, self._total)
        left = max(0.0, total - self._measured(self._work_done, self._bytes_done, self._done))
        eta = self._time_left.seconds_left(left) if total else None
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

    def _recent_rate(self, now: float) -> float | None:
        """Bytes per second over the last RATE_WINDOW_SECONDS (since the stage began, until that long has
        passed); None before any byte was measured."""
        samples = self._rate_samples
        samples.append((now, self._measured_bytes))
        while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW_SECONDS:
            samples.popleft()
        since, measured_then = samples[0]
        measured = self._measured_bytes - measured_then
        return measured / (now - since) if measured > 0 and now > since else None


# How far back the rate looks: long enough to smooth bursts, short enough to follow a connection that slows.
RATE_WINDOW_SECONDS = 10.0


class TimeLeft:
    """The time left of one stage, predicted from how long its work so far took; the one predictor behind every
    "time left" (the window's Jobs page, the command line's bar, the publish dialog). It is given the times rather
    than reading a clock, so a test replays any job's timing.

    Work is counted in the stage's units of cost (see ProgressEvent), and the work left is predicted at the
    seconds per unit measured lately:
    - not over the first step: it carries the stage's warm-up (threads starting, the first reads not yet
      overlapped with computing, lazy initialisation: a third of a small merge's time for a sixth of its bytes),
      which the rest does not repeat; until a second step, the first is all there is;
    - over the later half of the work done since (so a warm-up longer than a step, such as an extraction's first
      decomposition loading linear algebra, fades out), or over the last TIME_LEFT_WINDOW_SECONDS when that is
      shorter (so a long job follows a machine, or a connection, that slows down); always at least the last step.
    """

    def __init__(self, started: float) -> None:
        self._start = (started, 0.0)
        self._warm: float | None = None  # the work measured by the end of the first step
        self._recent: deque[tuple[float, float]] = deque()  # (time, work measured) from the rate's origin on

    def record(self, now: float, measured: float) -> None:
        """The stage has done `measured` units of work (done now, not found done already) by time `now`. A step
        without work adds its time to the next one's."""
        if measured <= (self._recent[-1][1] if self._recent else 0.0):
            return
        if self._warm is None:
            self._warm = measured
        self._recent.append((now, measured))
        recent, warm = self._recent, self._warm
        while len(recent) > 2 and (measured - recent[1][1] >= (measured - warm) / 2
                                   or now - recent[1][0] >= TIME_LEFT_WINDOW_SECONDS):
            recent.popleft()

    def seconds_left(self, work_left: float) -> float | None:
        """Seconds to do `work_left` more units at the rate measured lately: None before any work was measured
        (even with none left: work found done already says nothing of the time), else 0 when none is left."""
        if not self._recent:
            return None
        if work_left <= 0:
            return 0.0
        since, then = self._start if len(self._recent) == 1 else self._recent[0]
        now, measured = self._recent[-1]
        return work_left * (now - since) / (measured - then) if now > since else None


# How far back the time left looks at most: a long job's time left follows a machine that gets busier.
TIME_LEFT_WINDOW_SECONDS = 30.0
