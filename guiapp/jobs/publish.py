"""The publish job: upload a model folder to the Hub with its reviewed card (see guiapp.hub.upload)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from guiapp.jobs.runner import Job, JobSpec
from guiapp.progress import Progress


@dataclass(frozen=True)
class PublishSpec(JobSpec):
    """An upload of `folder` to `repo_id` with its reviewed `card` (`any_folder`: the user confirmed publishing a
    folder that does not look like a model).

    The checks run again inside the job (the token or the repo may have changed since the dialog checked), so a
    refusal ends the job with its explanation before anything is sent. The summary has "url" (the commit) and
    "repo" (the full name: a bare name goes under the signed-in user).
    """

    kind: ClassVar[str] = "publish"
    folder: str
    repo_id: str
    private: bool = True
    card: str | None = None
    any_folder: bool = False

    def job(self) -> Job:
        return Job(title=f"Publish {Path(self.folder).name} → {self.repo_id}", kind=self.kind, spec=self.to_dict(),
                   work=self._work)

    def _work(self, progress: Progress) -> dict[str, Any]:
        from guiapp.hub.upload import check_upload, upload_folder

        plan = check_upload(Path(self.folder), self.repo_id, private=self.private, any_folder=self.any_folder)
        return {"url": upload_folder(plan, progress, card=self.card), "repo": plan.repo_id}


def publish_job(folder: Path, repo_id: str, **settings: Any) -> Job:
    """A job that checks, then uploads `folder` to `repo_id` (see `PublishSpec`)."""
    return PublishSpec(str(folder), repo_id, **settings).job()
