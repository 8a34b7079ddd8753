"""Publishing a model folder to the Hub: checked before anything is sent, uploaded file by file, resumable.

`check_upload` finds every refusal before a byte leaves (not signed in, a read-only token, an invalid name, a
name owned by someone else); `upload_folder` then creates the repo (always private first, so a failed first
upload never leaves an empty public repo), uploads the large files one at a time through huggingface_hub's LFS
protocol (per-file and total progress, cancel between files), commits once, and only then makes the repo public
if asked. Uploading again after a failure sends only what the Hub does not have yet: the LFS batch answers
that the files already uploaded are there.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from guiapp.errors import InvalidTokenError, JobCancelled, MergesmithError, OutputError, UploadRefusedError
from guiapp.hub.connection import HubConnection, require_online
from guiapp.hub.failures import hub_errors
from guiapp.hub.references import is_hub_id
from guiapp.progress import Progress

CARD_NAME = "README.md"
# Files that are state of a local tool, not part of a model.
_SKIPPED = (".git", ".cache", "__pycache__", ".DS_Store")
# Mergesmith's own state is hidden and named ".mergesmith…" or ".<name>.mergesmith-…" (guiapp.engine.output_guard:
# the output marker, staging and retired folders, locks), so it is known by name without importing the engine.
_OWN_STATE = ".mergesmith"


@dataclass(frozen=True)
class UploadPlan:
    """What will be uploaded where: `files` are (path in repo, local path, size); `exists` when the repo is there
    already (owned by `user`, so uploading adds a commit to it)."""

    folder: Path
    repo_id: str
    private: bool
    user: str
    files: list[tuple[str, Path, int]]
    exists: bool

    @property
    def total_bytes(self) -> int:
        return sum(size for _, _, size in self.files)


def check_upload(folder: Path, repo_id: str, private: bool = True) -> UploadPlan:
    """Check everything an upload of `folder` to `repo_id` needs, sending nothing but read requests.

    Raises UploadRefusedError (not signed in, read-only token, invalid name, name of someone else's repo),
    OutputError for a folder without files, InvalidTokenError / OfflineError / ConnectionLostError from the Hub.
    """
    from huggingface_hub import get_token

    folder = Path(folder)
    files = _files_of(folder)
    if not is_hub_id(repo_id) or "/" not in repo_id or repo_id.endswith(".git") or ".." in repo_id:
        raise UploadRefusedError(
            f"'{repo_id}' is not a name the Hub accepts for a model.",
            hint="Use your-user-name/model-name: letters, digits, '-', '_' and '.', at most 96 characters each.")
    require_online("Publishing to the Hub")
    if get_token() is None:
        raise UploadRefusedError("You are not signed in to the Hub, so nothing can be published.",
                            hint="Sign in with an access token that can write (Hub › Sign in, or `hf auth login`).")
    api = HubConnection.current().api()
    with hub_errors(repo_id):
        identity = api.whoami()
    user = identity["name"]
    role = ((identity.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise UploadRefusedError("Your access token can only read: the Hub would refuse the upload.",
                            hint="Create a token with the 'write' role (Hub › Settings › Access tokens) and sign in "
                            "with it.")
    namespace = repo_id.split("/")[0]
    organisations = {org.get("name") for org in identity.get("orgs") or []}
    if namespace != user and namespace not in organisations:
        raise UploadRefusedError(f"You cannot publish under '{namespace}': it is not your account or one of your "
                            "organisations.", hint=f"Publish as {user}/{repo_id.split('/')[1]}.")
    exists = _repo_exists(api, repo_id)
    return UploadPlan(folder, repo_id, private, user, files, exists)


def upload_folder(plan: UploadPlan, progress: Progress | None = None, card: str | None = None) -> str:
    """Upload `plan`'s files (and `card` as README.md, when given); returns the commit's URL.

    Cancel stops the upload of the current file at once (JobCancelled); files uploaded whole stay on the Hub's
    storage, not in any commit, and are not sent again next time. Raises ConnectionLostError / RateLimitedError / InvalidTokenError
    and the other HubErrors, with the repo left private when this upload created it.
    """
    from contextlib import ExitStack

    from huggingface_hub import CommitOperationAdd, constants

    # hf_xet uploads from its own threads, where a cancel cannot reach (see guiapp.hub.downloads).
    constants.HF_HUB_DISABLE_XET = True
    progress = progress or Progress()
    api = HubConnection.current().api()
    operations = []
    with hub_errors(plan.repo_id), ExitStack() as open_files:
        api.create_repo(plan.repo_id, private=True, exist_ok=True)
        progress.start_stage(f"Uploading to {plan.repo_id}", total=len(plan.files), bytes_total=plan.total_bytes)
        for path_in_repo, local, size in plan.files:
            if card is not None and path_in_repo == CARD_NAME:
                continue
            handle = open_files.enter_context(_ReportingFile(local))
            operation = CommitOperationAdd(path_in_repo=path_in_repo, path_or_fileobj=handle)  # hashes it
            handle.report_to(progress, path_in_repo)
            try:
                api.preupload_lfs_files(plan.repo_id, additions=[operation])
            except Exception as error:  # huggingface_hub wraps what a read raises: a cancel stays a cancel
                cancelled = _cancel_behind(error)
                if cancelled is None:
                    raise
                raise cancelled from None
            handle.finish(size)
            operations.append(operation)
        if card is not None:
            operations.append(CommitOperationAdd(path_in_repo=CARD_NAME, path_or_fileobj=card.encode("utf-8")))
        progress.check_cancelled()
        commit = api.create_commit(plan.repo_id, operations=operations,
                                   commit_message=f"Upload {plan.folder.name} with Mergesmith")
        if not plan.private:
            api.update_repo_settings(plan.repo_id, private=False)
    progress.log(f"Published {plan.repo_id} ({'private' if plan.private else 'public'}): {commit.commit_url}")
    return commit.commit_url


class _ReportingFile(io.BufferedReader):
    """A file whose reads during the upload are progress (bytes, rate, time left) and a chance to cancel.

    Reads before `report_to` (huggingface_hub hashing the file) count for nothing; a retried request reads the
    file again from the start, so progress follows the furthest position read, not the sum of reads.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(io.FileIO(path, "rb"))
        self._progress: Progress | None = None
        self._item = ""
        self._reported = 0

    def report_to(self, progress: Progress, item: str) -> None:
        self._progress, self._item = progress, item

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        position = self.tell()
        if self._progress is not None and position > self._reported:
            self._progress.step(self._item, units=0, nbytes=position - self._reported)  # raises when cancelled
            self._reported = position
        return data

    def finish(self, size: int) -> None:
        """The file is on the Hub (or goes inline with the commit): count it whole, and stop reporting."""
        assert self._progress is not None, "report_to first"
        self._progress.step(self._item, units=1, nbytes=max(0, size - self._reported))
        self._progress = None


def _cancel_behind(error: BaseException) -> JobCancelled | None:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, JobCancelled):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _files_of(folder: Path) -> list[tuple[str, Path, int]]:
    if not folder.is_dir():
        raise OutputError(f"{folder} is not a folder.", hint="Choose the model folder to publish.")
    files = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part in _SKIPPED or _is_own_state(part) for part in relative.parts) or not path.is_file() \
                or path.is_symlink():
            continue
        files.append((relative.as_posix(), path, path.stat().st_size))
    if not files:
        raise OutputError(f"{folder} holds no files to publish.", hint="Choose the folder a job wrote.")
    return files


def _is_own_state(name: str) -> bool:
    return name.startswith(".") and _OWN_STATE in name


def _repo_exists(api, repo_id: str) -> bool:
    from huggingface_hub import errors as hf

    try:
        with hub_errors(repo_id):
            api.model_info(repo_id)
    except MergesmithError as error:
        if isinstance(error.__cause__, hf.RepositoryNotFoundError) and not isinstance(error, InvalidTokenError):
            return False
        raise
    return True
