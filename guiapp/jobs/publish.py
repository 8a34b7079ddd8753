"""The publish job: upload a model folder to the Hub with its reviewed card (see guiapp.hub.upload)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guiapp.jobs.runner import Job
from guiapp.progress import Progress


def publish_job(folder: Path, repo_id: str, *, private: bool = True, card: str | None = None,
                any_folder: bool = False) -> Job:
    """A job that checks, then uploads `folder` to `repo_id`; its summary has "url" (the commit) and "repo"
    (the full name: a bare name goes under the signed-in user). `any_folder`: the user confirmed publishing a
    folder that does not look like a model.

    The checks run again inside the job (the token or the repo may have changed since the dialog checked), so a
    refusal ends the job with its explanation before anything is sent.
    """
    spec = {"folder": str(folder), "repo_id": repo_id, "private": private, "card": card, "any_folder": any_folder}

    def work(progress: Progress) -> dict[str, Any]:
        from guiapp.hub.upload import check_upload, upload_folder

        plan = check_upload(Path(folder), repo_id, private=private, any_folder=any_folder)
        return {"url": upload_folder(plan, progress, card=card), "repo": plan.repo_id}

    return Job(title=f"Publish {Path(folder).name} → {repo_id}", kind="publish", spec=spec, work=work)
