"""The Qt side of the job runner: jobs go in, queued signals come out, and the history is kept.

The runner calls its listeners on its worker thread; here each callback becomes a queued signal handled on the
UI thread, so no widget is ever touched from the worker. Progress is thinned to at most `MAX_UPDATES_PER_SECOND`
per job (a stage change always gets through), which keeps the event loop free however fast tensors go.
"""

from __future__ import annotations

import time
from dataclasses import asdict

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal

from guiapp.facts.wording import for_window
from guiapp.jobs.history import JobRecord, load_history, save_history
from guiapp.jobs.runner import Job, JobListeners, JobResult, JobRunner, JobStatus
from guiapp.progress import ProgressEvent
from guiapp.ui.garbage import collect_garbage_now

MAX_UPDATES_PER_SECOND = 10


class JobBridge(QObject):
    """Submits jobs to a `JobRunner` and keeps `records` (history included) up to date on the UI thread."""

    record_added = Signal(str)  # key
    record_changed = Signal(str)  # key: status, summary, explanation
    progress = Signal(str, object)  # key, ProgressEvent
    log_line = Signal(str, str)  # key, line

    _started = Signal(int)
    _event = Signal(int, object)
    _log = Signal(int, str)
    _done = Signal(object, object)  # JobResult, explanation dict or None

    def __init__(self, parent: QObject | None = None, *, keep_history: bool = True) -> None:
        super().__init__(parent)
        self.runner = JobRunner()
        self._keep_history = keep_history
        self.records: list[JobRecord] = load_history() if keep_history else []
        self.latest: dict[str, ProgressEvent] = {}
        self._keys: dict[int, str] = {}
        self._last_emit: dict[int, tuple[float, str]] = {}  # job id -> (time, stage), touched by the worker only
        self._unsent: dict[int, ProgressEvent] = {}  # job id -> its latest event held back by the rate limit
        queued = Qt.ConnectionType.QueuedConnection
        self._started.connect(self._on_started, queued)
        self._event.connect(self._on_event, queued)
        self._log.connect(self._on_log, queued)
        self._done.connect(self._on_done, queued)
        if self.records:
            self._save()  # records interrupted by the last shutdown are now marked so

    # --- what pages call ------------------------------------------------------------------------------------

    def submit(self, job: Job, retry_of: str | None = None) -> JobRecord:
        """Queue `job` (`retry_of`: the key of the job it runs again) and list it."""
        key = f"{int(time.time() * 1000)}-{job.id}"
        record = JobRecord(key=key, title=job.title, kind=job.kind, spec=job.spec, status=JobStatus.QUEUED,
                           created=time.time(), retry_of=retry_of)
        self.records.append(record)
        self._keys[job.id] = key
        self.runner.submit(job, JobListeners(on_event=self._worker_event, on_log=self._worker_log,
                                              on_start=lambda j: self._started.emit(j.id), on_done=self._worker_done))
        self._save()
        self.record_added.emit(key)
        return record

    def cancel(self, key: str) -> None:
        for job_id, known in self._keys.items():
            if known == key:
                self.runner.cancel(job_id)

    def record(self, key: str) -> JobRecord | None:
        return next((r for r in self.records if r.key == key), None)

    def active(self) -> list[JobRecord]:
        return [r for r in self.records if r.status.active]

    def retry(self, key: str, changes: dict | None = None) -> JobRecord:
        """Submit the job of record `key` again with `changes` to its settings ({} for the same job; None for its
        explanation's remedy).

        Raises MergesmithError (e.g. RecipeError) when the changed settings do not make a valid job.
        """
        from guiapp.jobs.fixes import offered_remedy
        from guiapp.jobs.specs import retry  # imports the recipe parser

        record = self.record(key)
        if changes is None:
            remedy = offered_remedy(record.explanation or {}, record.output)
            changes = remedy.changes if remedy is not None else {}
        return self.submit(retry(record.kind, record.spec, changes), retry_of=key)

    def clear_finished(self) -> None:
        self.records = [r for r in self.records if r.status.active]
        self._save()

    def shutdown(self, timeout: float | None = 10.0) -> None:
        """Cancel every job and wait (up to `timeout` s) for the worker to stop."""
        self.runner.shutdown(timeout)
        # The worker's last signals (the cancelled job's end) are still queued: deliver them before saving.
        QCoreApplication.sendPostedEvents(self)
        self._save()

    # --- worker thread --------------------------------------------------------------------------------------

    def _worker_event(self, job: Job, event: ProgressEvent) -> None:
        now = time.monotonic()
        last_time, last_stage = self._last_emit.get(job.id, (0.0, ""))
        finished_stage = event.total and event.done >= event.total
        if event.stage != last_stage or finished_stage or now - last_time >= 1 / MAX_UPDATES_PER_SECOND:
            self._last_emit[job.id] = (now, event.stage)
            self._unsent.pop(job.id, None)
            self._event.emit(job.id, event)
        else:
            self._unsent[job.id] = event

    def _worker_log(self, job: Job, line: str) -> None:
        self._log.emit(job.id, for_window(line))

    def _worker_done(self, result: JobResult) -> None:
        unsent = self._unsent.pop(result.job.id, None)
        if unsent is not None:  # where the job stopped, for its bar and the history ("Cancelled at 49%")
            self._event.emit(result.job.id, unsent)
        explanation = None
        if result.status is JobStatus.FAILED:
            from guiapp.system.explain import explain

            explanation = asdict(explain(result.error, {"job": result.job.title}))
        self._done.emit(result, explanation)

    # --- UI thread --------------------------------------------------------------------------------------------

    def _on_started(self, job_id: int) -> None:
        record = self.record(self._keys[job_id])
        record.status, record.started = JobStatus.RUNNING, time.time()
        self._save()
        self.record_changed.emit(record.key)

    def _on_event(self, job_id: int, event: ProgressEvent) -> None:
        key = self._keys[job_id]
        self.latest[key] = event
        self.progress.emit(key, event)

    def _on_log(self, job_id: int, line: str) -> None:
        self._add_log(self.record(self._keys[job_id]), line)

    def _on_done(self, result: JobResult, explanation: dict | None) -> None:
        record = self.record(self._keys[result.job.id])
        record.status = result.status
        # The job's own clock: the UI thread may hear of the start after a quick job already ended (its elapsed
        # time came out below zero, shown as "0 s").
        record.started, record.finished = result.started, result.finished
        record.summary = result.summary
        record.explanation = explanation
        last = self.latest.get(record.key)
        if last is not None:  # where it stopped, for the history after a restart ("Cancelled at 49%")
            record.last_stage, record.last_fraction = last.stage, last.fraction
        # The log tells the whole story, its end included.
        if explanation is not None:
            self._add_log(record, f"Failed: {explanation['what']}")
        elif result.status is JobStatus.DONE:
            from guiapp.system.units import format_seconds

            where = f"; the result is in {record.output}" if record.output else ""  # Try and Perplexity write none
            self._add_log(record, f"Finished in {format_seconds(result.elapsed)}{where}.")
        self._save()
        self.record_changed.emit(record.key)
        collect_garbage_now()

    def _add_log(self, record: JobRecord, line: str) -> None:
        record.add_log(line)
        self.log_line.emit(record.key, line)

    def _save(self) -> None:
        if self._keep_history:
            save_history(self.records)
