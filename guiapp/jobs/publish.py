"""Publishing a model folder or a GGUF file: what the Publish dialog shows before (the licence, warnings about the inputs'
licences, the model card, whether the Hub would accept the upload) and the publish job that uploads the folder
with its reviewed card (see guiapp.hub.upload and guiapp.hub.publish_card).

The Hub modules are imported inside each function so that opening the dialog waits for no Hub client."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from guiapp.jobs.runner import Job, JobSpec
from guiapp.progress import Progress

if TYPE_CHECKING:
    from guiapp.hub.upload import UploadPlan


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


def licence_choices() -> list[str]:
    """The licences the dialog offers first (the user may type another). Never raises."""
    from guiapp.hub.publish_card import LICENCES

    return list(LICENCES)


@dataclass(frozen=True)
class PublishStart:
    """What the dialog fills in once it has asked: the signed-in `user` (None: nobody), the `licence` the inputs
    share ("other" when they differ or state none) and `warnings` about publishing a model made from them."""

    user: str | None
    licence: str
    warnings: list[str]


def prepare_publish(folder: Path) -> PublishStart:
    """Ask the Hub who is signed in and what licences the models `folder` (or a GGUF file) was made from carry
    (their Hub pages). Raises InvalidTokenError, OfflineError, HubUnreachableError or ConnectionLostError when the
    Hub cannot say, CheckpointError for a GGUF file that cannot be read."""
    from guiapp.hub.publish_card import input_licences, licence_warnings, preset_licence
    from guiapp.hub.tokens import signed_in_user

    user = signed_in_user()
    inputs = input_licences(source_models(Path(folder)))
    return PublishStart(user, preset_licence(inputs), licence_warnings(inputs))


def source_models(folder: Path) -> list[str]:
    """The Hub models publishing `folder` names as made from: a GGUF file's source (from its metadata), a
    merge's inputs, an adapter's base. Raises CheckpointError for a GGUF file that cannot be read."""
    from guiapp.gguf.card import gguf_base_models, gguf_files
    from guiapp.hub.publish_card import base_models

    files = gguf_files(Path(folder))
    return gguf_base_models(files) if files else base_models(Path(folder))


def model_card(folder: Path, repo_id: str, licence: str) -> str:
    """The README.md to publish with `folder` as `repo_id` under `licence`, for the user to review: for GGUF
    files, how they were made and how to run them; else the folder's own card kept, with the licence, base
    models and tags set (a folder without a card gets a new one). Raises CheckpointError for a GGUF file that
    cannot be read."""
    from guiapp.gguf.card import gguf_card, gguf_files
    from guiapp.hub.publish_card import publish_card

    files = gguf_files(Path(folder))
    return gguf_card(files, repo_id, licence) if files else publish_card(Path(folder), repo_id, licence)


def suggested_repo_name(path: Path) -> str:
    """The repo name the Publish dialog proposes for `path`: a folder's name; for a GGUF file, its model's name
    without the type and with "-GGUF", as GGUF repos on the Hub are named ("merged-Q4_K_M.gguf" → "merged-GGUF").
    Never raises."""
    from guiapp.facts.gguf_types import KIND_WORDS

    path = Path(path)
    if path.suffix.lower() != ".gguf":
        return path.name
    stem = path.stem
    for kind in KIND_WORDS:
        if stem.lower().endswith(("-" + kind, "." + kind, "_" + kind)):
            stem = stem[: -len(kind) - 1]
            break
    return f"{stem or path.stem}-GGUF"


def card_with_licence(card: str, licence: str) -> str:
    """`card` with only its licence line changed to `licence` (the user's other edits stay). Never raises."""
    from guiapp.hub.publish_card import with_licence

    return with_licence(card, licence)


def check_publish(folder: Path, repo_id: str, private: bool) -> UploadPlan:
    """What publishing `folder` to `repo_id` would upload and where, asking the Hub (read requests only); a folder
    that does not look like a model is allowed here, its `not_a_model` saying why, for the user to confirm.
    Raises UploadRefusedError (not signed in, a token that may not write there, a bad or foreign name, a
    credential in a file), OutputError (no files), InvalidTokenError, OfflineError, ConnectionLostError, and
    CheckpointError for a GGUF file whose metadata cannot be read (its card could not say what it holds)."""
    from guiapp.hub.upload import check_upload

    source_models(Path(folder))
    return check_upload(Path(folder), repo_id, private, any_folder=True)
