"""Publishing a model folder (or one GGUF file) to the Hub: checked before anything is sent, uploaded file by file, resumable.

`check_upload` finds every refusal before a byte leaves (not signed in, a read-only token, an invalid name, a
name owned by someone else); `upload_folder` then creates the repo (always private first, so a failed first
upload never leaves an empty public repo), uploads the large files one at a time through huggingface_hub's LFS
protocol (per-file and total progress, cancel between files), commits once, and only then makes the repo public
if asked. Uploading again after a failure sends only what the Hub does not have yet: the LFS batch answers
that the files already uploaded are there.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from guiapp.errors import (
    HubResponseError,
    InvalidTokenError,
    MergesmithError,
    OutputError,
    UploadRefusedError,
)
from guiapp.facts.wording import say
from guiapp.hub.connection import HubConnection, require_online
from guiapp.hub.failures import hub_errors
from guiapp.hub.references import is_hub_id
from guiapp.progress import Progress
from guiapp.system.scrub import find_credential, shown
from guiapp.system.units import format_bytes

CARD_NAME = "README.md"
# The Hub takes files inline in a commit up to 10 MB; larger ones go through large-file storage.
INLINE_FILE_BYTES = 10 * 1000 * 1000
# How much of each file is searched for credentials: all of a text file, the header of a weights file.
SCANNED_BYTES = 16 * 1024 * 1024
_SCAN_BLOCK = 1024 * 1024
_SCAN_OVERLAP = 4096  # longer than any credential, so one cut in two by a block boundary is still found
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth")
# Files that are state of a local tool, not part of a model.
_SKIPPED = (".git", ".cache", "__pycache__", ".DS_Store")
# Mergesmith's own state is hidden and named ".mergesmith…" or ".<name>.mergesmith-…" (guiapp.checkpoints.output_guard:
# the output marker, staging and retired folders, locks), so it is known by name without importing the engine.
_OWN_STATE = ".mergesmith"


@dataclass(frozen=True)
class UploadPlan:
    """What will be uploaded where: `folder` is the folder or the GGUF file published, `files` are (path in repo,
    local path, size); `exists` when the repo is there
    already (owned by `user`, so uploading adds a commit to it). `not_a_model` says what the folder lacks to be a
    model or an adapter (None when it is one): it is only publishable when the user asked for it anyway."""

    folder: Path
    repo_id: str
    private: bool
    user: str
    files: list[tuple[str, Path, int]]
    exists: bool
    not_a_model: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(size for _, _, size in self.files)


def check_upload(folder: Path, repo_id: str, private: bool = True, *, any_folder: bool = False) -> UploadPlan:
    """Check everything an upload of `folder` (or of one .gguf file) to `repo_id` needs, sending nothing but read
    requests.

    A bare name ("merged") goes under the signed-in user's name. Raises UploadRefusedError (a credential in a
    file, a folder that is not a model unless `any_folder`, not signed in, a token that may not write there, an
    invalid name or one shaped like a secret, someone else's namespace, a public repo when `private`),
    OutputError for a folder without files or a file that is not GGUF, InvalidTokenError / OfflineError / ConnectionLostError from the Hub.
    """
    from huggingface_hub import get_token

    folder = Path(folder)
    files = _files_of(folder)
    if find_credential(repo_id) is not None:
        raise UploadRefusedError("The repo name looks like an access token or another secret: as a repo name "
                                 "everyone could read it.", hint="Choose another name for the model.")
    if not is_hub_id(repo_id) or repo_id.endswith(("/", ".git")) or ".." in repo_id:
        raise UploadRefusedError(
            f"'{repo_id}' is not a name the Hub accepts for a model.",
            hint="Use your-user-name/model-name: letters, digits, '-', '_' and '.', at most 96 characters each.")
    not_a_model = missing_model_parts([name for name, _, _ in files])
    if not_a_model is not None and not any_folder:
        raise UploadRefusedError(f"{folder} does not look like a model or an adapter: {not_a_model}.",
                                 why="Publishing a folder chosen by mistake (a home folder, say) would share "
                                 "private files.",
                                 hint=say("Choose the folder a job wrote.{cli_only: To publish this folder anyway, "
                                          "add {force} (`mergesmith hub upload FOLDER REPO --force`).}"))
    _refuse_credentials(files)
    require_online("Publishing to the Hub")
    if get_token() is None:
        raise UploadRefusedError("You are not signed in to the Hub, so nothing can be published.",
                            hint=say("Sign in with an access token that can write {sign_in_at:Hub › Sign in}."))
    api = HubConnection.current().api()
    with hub_errors(repo_id):
        identity = api.whoami()
    user = identity["name"]
    if "/" not in repo_id:
        repo_id = f"{user}/{repo_id}"
    access = ((identity.get("auth") or {}).get("accessToken") or {})
    if access.get("role") == "read":
        raise UploadRefusedError("Your access token can only read: the Hub would refuse the upload.",
                            hint="Create a token with the 'write' role (Hub › Settings › Access tokens) and sign in "
                            "with it.")
    namespace = repo_id.split("/")[0]
    organisations = {org.get("name") for org in identity.get("orgs") or []}
    if namespace != user and namespace not in organisations:
        raise UploadRefusedError(f"You cannot publish under '{namespace}': it is not your account or one of your "
                            "organisations.", hint=f"Publish as {user}/{repo_id.split('/')[1]}.")
    visibility = _repo_visibility(api, repo_id)
    if access.get("role") == "fineGrained":
        _check_fine_grained(access.get("fineGrained"), repo_id, exists=visibility is not None)
    if visibility == "public" and private:
        raise UploadRefusedError(
            f"{repo_id} is public already: uploading to it publishes these files to everyone, not privately.",
            hint=say("To publish to it anyway, {cli_only:add {public} (in the window: clear 'Private')}"
                     "{window_only:clear 'Private'}; to keep the files private, choose another repo name."))
    return UploadPlan(folder, repo_id, private, user, files, visibility is not None, not_a_model)


def missing_model_parts(names: list[str]) -> str | None:
    """What a folder holding the files `names` lacks to be a model (config.json and weights), an adapter
    (adapter_config.json and adapter weights) or a GGUF model, in words; None when it is one of them."""
    top = {name for name in names if "/" not in name}
    weights = {name for name in top if name.endswith(_WEIGHTS)}
    if any(name.endswith(".gguf") for name in names):
        return None
    if "adapter_config.json" in top:
        if any(name.startswith("adapter_model") for name in weights):
            return None
        return "it has adapter_config.json but no adapter weights (adapter_model.safetensors)"
    if "config.json" in top:
        return None if weights else "it has config.json but no weights (.safetensors or .bin files)"
    return ("it has neither config.json with weights, nor adapter_config.json with adapter weights, nor a .gguf "
            "file")


def _refuse_credentials(files: list[tuple[str, Path, int]]) -> None:
    """Raise UploadRefusedError naming the first file that holds a credential (the token in use, API keys,
    private keys); an unreadable file raises its OSError."""
    for name, local, _ in files:
        kind = _credential_in_file(local)
        if kind is not None:
            raise _credential_refusal(name, kind)


def _credential_in_file(path: Path) -> str | None:
    """The credential in the text parts of `path`: all of it up to SCANNED_BYTES; of a safetensors file, its
    JSON header (the rest is tensor bytes, and a shard can be gigabytes)."""
    overlap = b""
    with path.open("rb") as handle:
        limit = SCANNED_BYTES
        if path.suffix == ".safetensors":
            head = handle.read(8)
            limit = min(limit, 8 + int.from_bytes(head, "little")) if len(head) == 8 else limit
            handle.seek(0)
        while handle.tell() < limit:
            block = handle.read(min(_SCAN_BLOCK, limit - handle.tell()))
            if not block:
                return None
            kind = find_credential((overlap + block).decode("latin-1"))
            if kind is not None:
                return kind
            overlap = block[-_SCAN_OVERLAP:]
    return None


def _credential_refusal(name: str, kind: str) -> UploadRefusedError:
    return UploadRefusedError(
        f"{name} holds {kind}: publishing it would give it to everyone who can see the repo. Nothing was sent.",
        hint=f"Remove {name} (or the secret in it) from what you publish, and replace the secret if it was ever "
        "shared; then publish again.")


def _check_fine_grained(grants: object, repo_id: str, exists: bool) -> None:
    """Raise UploadRefusedError unless a fine-grained token's scoped permissions let it write to `repo_id`
    (the namespace's "repo.write", or the repo's own when it exists already)."""
    namespace = repo_id.split("/")[0]
    scoped = grants.get("scoped") if isinstance(grants, dict) else None
    for entry in scoped if isinstance(scoped, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("entity"), dict):
            continue
        name, permissions = entry["entity"].get("name"), entry.get("permissions")
        if (name == namespace or (exists and name == repo_id)) and isinstance(permissions, list) \
                and "repo.write" in permissions:
            return
    raise UploadRefusedError(
        f"Your fine-grained access token may not write to repos under '{namespace}': it lacks the permission "
        f"\"Write access to contents/settings of all repos\" (repo.write) for {namespace}.",
        hint=f"Edit the token ({HubConnection.current().shown_endpoint}/settings/tokens): under Repositories "
        f"permissions for {namespace}, tick 'Write access to contents/settings of all repos'; then publish again.")


def upload_folder(plan: UploadPlan, progress: Progress | None = None, card: str | None = None) -> str:
    """Upload `plan`'s files (and `card` as README.md, when given); returns the commit's URL, fit to print.

    A card holding a credential is refused before anything is sent (UploadRefusedError). Cancel stops the
    upload of the current file at once (JobCancelled); files uploaded whole stay on the Hub's storage, not in any
    commit, and are not sent again next time. A Hub that would leave files out (marks them ignored) or wants a
    large file inline raises before the commit. Raises ConnectionLostError / RateLimitedError /
    InvalidTokenError and the other HubErrors, with the repo left private when this upload created it.
    """
    from contextlib import ExitStack

    from huggingface_hub import CommitOperationAdd, constants

    if card is not None and (kind := find_credential(card)) is not None:
        raise _credential_refusal(f"The model card ({CARD_NAME})", kind)
    # hf_xet uploads from its own threads, where a cancel cannot reach (see guiapp.hub.downloads).
    constants.HF_HUB_DISABLE_XET = True
    progress = progress or Progress()
    api = HubConnection.current().api()
    operations, ignored = [], []
    with _quiet_huggingface_hub(), hub_errors(plan.repo_id, uploading=True), ExitStack() as open_files:
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
            except Exception as error:  # huggingface_hub wraps what a read or a check raises: ours stays ours
                ours = _ours_behind(error)
                if ours is None:
                    raise
                raise ours from None
            # What the preupload answer said, kept by huggingface_hub on the operation (no public accessor).
            _check_upload_mode(operation, size, plan.repo_id)
            if operation._should_ignore:
                ignored.append(path_in_repo)
            handle.finish(size)
            operations.append(operation)
        if ignored:
            raise UploadRefusedError(
                f"The Hub would leave out {', '.join(ignored)} of the upload to {plan.repo_id} (it marks them as "
                "ignored, as a .gitignore in the repo would): the published model would be incomplete. Nothing "
                "was committed.",
                hint=f"Check the repo's .gitignore on {HubConnection.current().model_page(plan.repo_id)}, or "
                "publish to a new repo name.")
        if card is not None:
            operations.append(CommitOperationAdd(path_in_repo=CARD_NAME, path_or_fileobj=card.encode("utf-8")))
        progress.check_cancelled()
        commit = api.create_commit(plan.repo_id, operations=operations,
                                   commit_message=f"Upload {plan.folder.name} with Mergesmith")
        if not plan.private:
            api.update_repo_settings(plan.repo_id, private=False)
    url = shown(str(commit.commit_url))
    progress.log(f"Published {plan.repo_id} ({'private' if plan.private else 'public'}): {url}")
    return url


def _check_upload_mode(operation, size: int, repo_id: str) -> None:
    """Raise HubResponseError when the Hub wants a large file sent inline in the commit: huggingface_hub would
    hold it in memory as base64 (a third larger), and the Hub itself takes inline files of at most 10 MB."""
    if operation._upload_mode == "regular" and size > INLINE_FILE_BYTES:
        raise HubResponseError(
            f"The Hub at {HubConnection.current().shown_endpoint} asked for {operation.path_in_repo} "
            f"({format_bytes(size)}) inline in the commit instead of through large-file storage, which the Hub "
            f"does for files above {format_bytes(INLINE_FILE_BYTES)}. Nothing was committed to {repo_id}.",
            why="Sending it inline would hold the whole file in memory, encoded.",
            hint=say("Try again later; if {mirror}, check that it is up to date and trustworthy."))


@contextmanager
def _quiet_huggingface_hub() -> Iterator[None]:
    """Keep huggingface_hub's own warnings ("HTTP Error 500 thrown while requesting PUT …") and progress bars
    ("Upload 0 LFS files") out of the output while we upload: our progress and errors say it in our words."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    logger = logging.getLogger("huggingface_hub")
    level, bars_were_disabled = logger.level, are_progress_bars_disabled()
    logger.setLevel(logging.ERROR)
    disable_progress_bars()
    try:
        yield
    finally:
        logger.setLevel(level)
        if not bars_were_disabled:
            enable_progress_bars()


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


def _ours_behind(error: BaseException) -> MergesmithError | None:
    """The cancel or refusal of ours that huggingface_hub wrapped in its own error, if any."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, MergesmithError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _files_of(folder: Path) -> list[tuple[str, Path, int]]:
    if folder.is_file() and folder.suffix.lower() == ".gguf":  # a GGUF file holds a whole model
        return [(folder.name, folder, folder.stat().st_size)]
    if not folder.is_dir():
        raise OutputError(f"{folder} is not a folder or a GGUF file.",
                          why="A model is published as its folder; only a GGUF file holds a whole model alone.",
                          hint="Choose the model folder to publish, or a .gguf file.")
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


def _repo_visibility(api, repo_id: str) -> str | None:
    """"public" or "private" for an existing repo (one the Hub does not say is private counts as public), None
    when there is no such repo."""
    from huggingface_hub import errors as hf

    try:
        with hub_errors(repo_id):
            info = api.model_info(repo_id)
    except MergesmithError as error:
        if isinstance(error.__cause__, hf.RepositoryNotFoundError) and not isinstance(error, InvalidTokenError):
            return None
        raise
    return "private" if info.private is True else "public"
