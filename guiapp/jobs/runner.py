"""Running jobs in a background thread, one at a time, with progress, cancellation, logs and results.

A `Job` is a title, a kind, the spec it was built from (a plain dict, so that a failed job can be retried with
changed settings) and a `work(progress)` callable from the engine. Each kind of job states its settings as a
`JobSpec` dataclass (`guiapp.jobs.specs.JOB_KINDS` lists them); the dict is that dataclass's fields. The runner calls listeners from its worker
thread; the window's Qt bridge forwards them as queued signals, the CLI prints them. No Qt here.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, ClassVar, Self

from guiapp.errors import JobCancelled
from guiapp.jobs import durations
from guiapp.progress import CancelToken, PausePoint, Progress, ProgressEvent

# What a job's boundary lets through instead of recording a failure: the user's Ctrl-C, an exit, a generator
# closing, an asyncio cancellation.
PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)


class JobStatus(StrEnum):
    """Where a job is. The value is what the history file stores; INTERRUPTED marks a job that was queued or
    running when Mergesmith last stopped."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def active(self) -> bool:
        """Waiting or running: it can be cancelled, and it is not finished."""
        return self in (JobStatus.QUEUED, JobStatus.RUNNING)

    @property
    def retryable(self) -> bool:
        """Failed, cancelled and interrupted jobs can all be run again as they were."""
        return self in (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.INTERRUPTED)


# Spec keys an earlier version of Mergesmith saved under another name (extractions and applications called their
# output folder "out"); read when a spec comes back from the history file.
OLD_SPEC_KEYS = {"out": "output"}


def upgrade_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`spec` with keys saved by an earlier version renamed to today's (a key already there wins)."""
    upgraded = dict(spec)
    for old, new in OLD_SPEC_KEYS.items():
        if old in upgraded:
            value = upgraded.pop(old)
            upgraded.setdefault(new, value)
    return upgraded


class JobSpec(ABC):
    """Base of the settings of one kind of job (each kind is a frozen dataclass deriving from it): what a job
    records so that it can be run again, after a restart or with a remedy's setting changed.

    Every kind names its output folder `output` (when it writes one)."""

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """The settings as the history saves them (values shared, not copied: a recipe is kept as given)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Self:
        """The settings a saved spec holds, older key names included; keys no setting has are ignored. Raises
        TypeError when a required setting is missing."""
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{key: value for key, value in upgrade_spec(spec).items() if key in known})

    def with_setting(self, setting: str, value: Any) -> Self:
        """These settings with `setting` changed to `value` (a remedy's change); a setting this kind of job does
        not have (a download's force_download: a retried job reads its files again anyway) changes nothing."""
        if setting in {f.name for f in fields(self)}:  # type: ignore[arg-type]
            return replace(self, **{setting: value})  # type: ignore[type-var]
        return self

    @abstractmethod
    def job(self) -> Job:
        """The job these settings describe (raises the kind's errors, e.g. RecipeError for a merge)."""

    def models_to_try(self, output: str | None) -> list[str]:
        """The models a finished job of this kind offers to compare on the Try page: its inputs, then its
        output; none for a kind that makes no model."""
        return []


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
