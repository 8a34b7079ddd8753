"""The merge lab as a job (the CLI's `mergesmith lab` and the window's Lab page run it the same way)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from guiapp.jobs.runner import Job


def lab_job(spec: dict[str, Any], on_trial: Callable[[Any], None] | None = None) -> Job:
    """A job running `guiapp.lab.search.run_lab` with the settings `spec` holds (LabSettings' fields, paths as
    text); `on_trial` hears each trial as it is recorded, on the job's thread. The summary is `LabRun.summary()`."""
    spec = {key: str(value) if isinstance(value, Path) else value for key, value in spec.items()}

    def work(progress) -> dict[str, Any]:
        from guiapp.lab.search import LabSettings, run_lab

        paths = {key: Path(spec[key]) for key in ("recipe", "text", "out", "prompts") if spec.get(key)}
        return run_lab(LabSettings(**{**spec, **paths}), progress, on_trial).summary()

    return Job(title=f"Merge lab: {spec['trials']} trials", kind="lab", spec=spec, work=work)


def lab_spec(settings: Any) -> dict[str, Any]:
    """The spec of a LabSettings (what the Jobs page keeps to run it again)."""
    return {key: str(value) if isinstance(value, Path) else value for key, value in asdict(settings).items()}
