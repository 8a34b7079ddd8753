"""The jobs list the window shows, kept across restarts as JSON in Mergesmith's config folder.

Each `JobRecord` is what a user needs to see a finished job again: its title, settings (for Retry), status,
times, result summary, the tail of its log and, after a failure, the explanation. Secrets never reach the
file: any setting whose name says token, password or secret is dropped before saving.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePath
from typing import Any

from guiapp.errors import MergesmithError
from guiapp.jobs.runner import JobStatus, upgrade_spec
from guiapp.system.bounded import JSON_BYTES, check_value_size, describe_value, load_json_limited
from guiapp.system.paths import settings_file
from guiapp.system.scrub import scrub

HISTORY_NAME = "jobs_history.json"
MAX_RECORDS = 200
MAX_LOG_LINES = 400
# A record's setting that would hold more values than this once written out is not kept.
MAX_STORED_VALUES = 20_000
# ... and a text longer than this keeps only its end: one failed job's details must not fill the history file.
MAX_STORED_CHARACTERS = 100_000
_SECRET_KEY = re.compile(r"(^|_)(token|password|secret|api_key)$", re.IGNORECASE)


@dataclass
class JobRecord:
    """One job as the Jobs page lists it. `key` is unique across restarts (job ids restart at 1)."""

    key: str
    title: str
    kind: str
    spec: dict[str, Any]
    status: JobStatus
    created: float
    started: float | None = None
    finished: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    explanation: dict[str, Any] | None = None
    retry_of: str | None = None  # the key of the job this one runs again
    last_stage: str = ""  # the stage and the fraction of it done when the job ended
    last_fraction: float | None = None

    @property
    def output(self) -> str | None:
        """The folder the job wrote (or will write), for "Open output folder"."""
        return self.summary.get("output") or self.spec.get("output")

    def add_log(self, line: str) -> None:
        self.log.append(line)
        del self.log[:-MAX_LOG_LINES]

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready data: secrets dropped, and a setting too large to keep (a recipe whose
        values share lists, as YAML aliases make them) replaced by a note, so saving never expands it."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}  # asdict() would copy, and expand, the spec
        data["spec"] = without_secrets({key: _storable(value) for key, value in self.spec.items()})
        data["summary"] = _storable(self.summary)
        data["explanation"] = _storable(self.explanation)
        data["log"] = list(self.log)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobRecord:
        """The record `data` holds, as this or an earlier version saved it (older spec keys are renamed).
        Raises ValueError for a status no version wrote, TypeError when a field is missing or of the wrong kind."""
        known = {f.name for f in fields(cls)}
        record = cls(**{key: value for key, value in data.items() if key in known})
        record.status = JobStatus(record.status)
        record.spec = upgrade_spec(record.spec)
        return record


def _storable(value: Any) -> Any:
    """`value` as it is saved: a note when it holds too many values, else a copy whose long texts keep only their
    end (where a traceback names its error) and whose other objects are described, never written out (an object's
    text could expand shared lists)."""
    try:
        check_value_size(value, "This setting", MergesmithError, max_nodes=MAX_STORED_VALUES)
    except MergesmithError:
        return {"not_kept": f"too large to keep: {describe_value(value)}"}
    return _bounded_copy(value)


def _bounded_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key)[:MAX_STORED_CHARACTERS]: _bounded_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_bounded_copy(item) for item in value]
    if isinstance(value, str):
        cut = len(value) - MAX_STORED_CHARACTERS
        return value if cut <= 0 else f"({cut:,} characters left out) …" + value[-MAX_STORED_CHARACTERS:]
    if value is None or isinstance(value, (bool, float)) or isinstance(value, int) and value.bit_length() <= 128:
        return value
    if isinstance(value, PurePath):
        return _bounded_copy(str(value))
    return describe_value(value, limit=200)


def without_secrets(value: Any) -> Any:
    """A copy of `value` (nested dicts and lists) without keys that name a secret."""
    if isinstance(value, dict):
        return {k: without_secrets(v) for k, v in value.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(value, list):
        return [without_secrets(v) for v in value]
    return value


def history_path() -> Path:
    return settings_file(HISTORY_NAME)


def load_history() -> list[JobRecord]:
    """The saved records, oldest first; a missing or damaged file is an empty history, never an error.

    Jobs that were queued or running when the app last stopped are marked as interrupted.
    """
    try:
        entries = load_json_limited(history_path(), JSON_BYTES, MergesmithError, what="job history").get("jobs", [])
        records = [JobRecord.from_json(entry) for entry in entries if isinstance(entry, dict)]
    except (MergesmithError, ValueError, TypeError, AttributeError):
        return []
    for record in records:
        if record.status.active:
            record.status = JobStatus.INTERRUPTED
            record.add_log("Mergesmith was closed before this job finished.")
    return records


def save_history(records: list[JobRecord]) -> None:
    """Write the newest `MAX_RECORDS` records (write then rename: a crash never leaves half a file).

    An unwritable config folder costs the history, not the job, so OSError is swallowed here.
    """
    path = history_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".jobs_history.", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            text = json.dumps({"jobs": [r.to_json() for r in records[-MAX_RECORDS:]]}, indent=1, default=str)
            stream.write(scrub(text))  # specs, logs and explanations may quote a token or a password
        os.replace(temporary, path)
    except OSError:
        pass
