"""Running jobs in a background thread, one at a time, with progress, cancellation, logs and results.

A `Job` is a title, a kind, the spec it was built from (a plain dict, so that a failed job can be retried with
changed settings) and a `work(progress)` callable from the engine. The runner calls listeners from its worker
thread; the window's Qt bridge forwards them as queued signals, the CLI prints them. No Qt here.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from guiapp.errors import JobCancelled
from guiapp.jobs import durations
from guiapp.progress import CancelToken, PausePoint, Progress, ProgressEvent

# What a job's boundary lets through instead of recording a failure: the user's Ctrl-C, an exit, a generator
# closing, an asyncio cancellation.
PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)


class JobStatus(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass
class Job:
    """A unit of work. `work(progress)` returns a summary dict (it may name "output": the folder written)."""

    title: str
    kind: str
    spec: dict[str, Any]
    work: Callable[[Progress], dict[str, Any]]
    id: int = field(default_factory=lambda: next(_job_ids))


_job_ids = itertools.count(1)


@dataclass
class JobResult:
    """How a job ended. `error` is the exception of a failed job; `traceback` its text for the Details view."""

    job: Job
    status: JobStatus
    summary: dict[str, Any]
    error: BaseException | None
    traceback: str
    log: list[str]
    started: float
    finished: float

    @property
    def elapsed(self) -> float:
        return self.finished - self.started


@dataclass
class JobListeners:
    """Callbacks a caller wants for one job; each is called from the worker thread."""

    on_event: Callable[[Job, ProgressEvent], None] | None = None
    on_log: Callable[[Job, str], None] | None = None
    on_start: Callable[[Job], None] | None = None
    on_done: Callable[[JobResult], None] | None = None


def run_job(job: Job, listeners: JobListeners | None = None, cancel: CancelToken | None = None,
            pause_at: PausePoint | None = None) -> JobResult:
    """Run `job` in the calling thread (held once at `pause_at`, see PausePoint) and return its result; never raises
    for a failure of the job itself."""
    listeners = listeners or JobListeners()
    log: list[str] = []

    def on_log(line: str) -> None:
        log.append(line)
        if listeners.on_log:
            listeners.on_log(job, line)

    def on_event(event: ProgressEvent) -> None:
        if listeners.on_event:
            listeners.on_event(job, event)

    progress = Progress(on_event=on_event, on_log=on_log, cancel=cancel, pause_at=pause_at)
    if listeners.on_start:
        listeners.on_start(job)
    started = time.time()
    summary: dict[str, Any] = {}
    error: BaseException | None = None
    trace = ""
    durations.job_started()
    try:
        progress.check_cancelled()
        summary = job.work(progress) or {}
        status = JobStatus.DONE
        durations.job_finished()  # this machine's throughput for the next estimate of this kind
    except JobCancelled as cancelled:
        status, error = JobStatus.CANCELLED, cancelled
        on_log("Cancelled. Nothing was left behind.")
    except BaseException as failure:  # a job's failure is data for the user, not a crash of the app
        # A native library's panic (pyo3's PanicException: the tokenizers library) is a BaseException and would
        # kill the worker thread; interrupts, exits and cancellations are not failures of the job and go on.
        if isinstance(failure, PASS_THROUGH):
            raise
        status, error = JobStatus.FAILED, failure
        trace = traceback.format_exc()
    result = JobResult(job, status, summary, error, trace, log, started, time.time())
    if listeners.on_done:
        listeners.on_done(result)
    return result


class JobRunner:
    """A queue of jobs run one at a time on a background thread.

    `submit` returns at once; `cancel(job_id)` asks a queued or running job to stop (a running job stops at its
    next tensor or chunk). `shutdown()` cancels everything and waits for the worker. Jobs that start while
    `pause_at` is set are held once at that point (see PausePoint).
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Job, JobListeners] | None] = queue.Queue()
        self._cancels: dict[int, CancelToken] = {}
        self._lock = threading.Lock()
        self.pause_at: PausePoint | None = None
        self._thread = threading.Thread(target=self._work, name="mergesmith-jobs", daemon=True)
        self._thread.start()

    def submit(self, job: Job, listeners: JobListeners | None = None) -> Job:
        with self._lock:
            self._cancels[job.id] = CancelToken()
        self._queue.put((job, listeners or JobListeners()))
        return job

    def cancel(self, job_id: int) -> None:
        with self._lock:
            token = self._cancels.get(job_id)
        if token is not None:
            token.cancel()

    def shutdown(self, timeout: float | None = None) -> None:
        with self._lock:
            for token in self._cancels.values():
                token.cancel()
        self._queue.put(None)
        self._thread.join(timeout)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            job, listeners = item
            with self._lock:
                token = self._cancels[job.id]
            try:
                run_job(job, listeners, token, self.pause_at)
            finally:
                with self._lock:
                    self._cancels.pop(job.id, None)
