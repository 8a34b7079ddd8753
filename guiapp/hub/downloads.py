"""Download the files a merge needs into the standard Hugging Face cache, with progress, cancel and resume.

Files go through `hf_hub_download`, so other tools (transformers, mergekit, vLLM) find them in the same cache.
Progress and cancel ride on its `tqdm_class` hook: the bar it creates for each file reports every chunk to our
`Progress`, whose `step` raises JobCancelled once the user cancels. huggingface_hub resumes a file by itself
(HTTP Range) when the connection drops mid-file; a cancelled file leaves no partial data behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.utils import tqdm as hub_progress_bar

from guiapp.errors import CheckpointError, InsufficientResourcesError
from guiapp.facts.wording import say
from guiapp.hub.connection import HubConnection, require_online
from guiapp.hub.details import RepoFile, model_details
from guiapp.hub.failures import hub_errors
from guiapp.progress import Progress
from guiapp.system.resources import disk
from guiapp.system.units import format_bytes

# Cancel, resume and progress all happen at chunk boundaries; huggingface_hub's default 10 MiB chunk would
# make a cancel wait (and a resume re-fetch) up to 10 MiB, more than a second on many connections.
CHUNK_BYTES = 512 * 1024
# Room left free on the cache's disk beyond the files themselves (lock files, refs, the OS's own needs).
HEADROOM_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class DownloadPlan:
    """What downloading a model will fetch: its needed files, and which of them the cache already holds."""

    repo_id: str
    revision: str
    commit: str
    files: tuple[RepoFile, ...]
    cached: frozenset[str]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def missing_bytes(self) -> int:
        return sum(f.size for f in self.files if f.name not in self.cached)


def plan_download(
    repo_id: str, revision: str | None = None, *, connection: HubConnection | None = None
) -> DownloadPlan:
    """The files of `repo_id` a merge needs and which are already cached (one model-info request).

    Raises the errors of `model_details` (offline, not found, rate limited…).
    """
    from huggingface_hub import try_to_load_from_cache

    connection = connection or HubConnection.current()
    details = model_details(repo_id, revision, connection=connection)
    cached = frozenset(
        f.name
        for f in details.needed_files
        if isinstance(
            try_to_load_from_cache(repo_id, f.name, cache_dir=connection.cache_dir, revision=details.commit), str
        )
    )
    return DownloadPlan(repo_id, details.revision, details.commit, details.needed_files, cached)


def download_model(
    repo_id: str,
    revision: str | None = None,
    *,
    progress: Progress | None = None,
    connection: HubConnection | None = None,
) -> Path:
    """Download what a merge needs of `repo_id` at `revision` (default main) and return its snapshot folder.

    The one-model case of `download_models`, with its progress and its errors.
    """
    return download_models([(repo_id, revision)], progress=progress, connection=connection)[0]


def download_models(
    models: Sequence[tuple[str, str | None]],
    *,
    progress: Progress | None = None,
    connection: HubConnection | None = None,
) -> list[Path]:
    """Download what a merge needs of each `(repo_id, revision)` and return their snapshot folders, in order.

    Every model is planned first (one model-info request each), so the one stage "Downloading" counts all their
    files and bytes from the start: the fraction only grows, files done never exceed the total, `item` names
    the model and the file ("model org/x: model-00002-of-00004.safetensors: 1.2 GB of 4.9 GB"), and the rate and
    time left come from bytes actually transferred (files already cached count as done, not as speed).
    Raises JobCancelled when cancelled (finished files stay in the cache); before any transfer, CheckpointError
    when a repo has no weights and InsufficientResourcesError when the disk is too small for all of them;
    GatedModelError, ModelNotFoundError, RevisionNotFoundError, OfflineError, RateLimitedError and
    ConnectionLostError for Hub failures.
    """
    from huggingface_hub import hf_hub_download

    connection = connection or HubConnection.current()
    progress = progress or Progress()
    plans = []
    for repo_id, revision in models:
        require_online(f"Downloading {repo_id}")
        plan = plan_download(repo_id, revision, connection=connection)
        if not any(f.name.endswith((".safetensors", ".bin")) for f in plan.files):
            raise CheckpointError(
                f"{repo_id} has no model weights Mergesmith can use (no .safetensors or .bin files at its top "
                "level).",
                hint=f"Check its files on {connection.model_page(repo_id)}; it may hold another format (GGUF, ONNX).",
            )
        plans.append(plan)
    _check_free_space(plans, connection.cache_dir)
    _use_cancellable_transfers()

    progress.start_stage("Downloading", total=sum(len(p.files) for p in plans),
                         bytes_total=sum(p.total_bytes for p in plans))
    snapshots = []
    for plan in plans:
        snapshot = _snapshot_folder(connection.cache_dir, plan)
        for file in plan.files:
            # Cached files go through hf_hub_download too: it only checks them (one HEAD request) and records the
            # requested branch or tag in the cache, so that `org/name@tag` also resolves offline later.
            counter = _FileCounter(progress, plan.repo_id, file, cached=file.name in plan.cached)
            with hub_errors(plan.repo_id, plan.revision):
                path = hf_hub_download(
                    plan.repo_id,
                    file.name,
                    revision=plan.revision,
                    cache_dir=connection.cache_dir,
                    endpoint=connection.endpoint,
                    tqdm_class=counter.bar_class(),
                )
            snapshot = Path(path).parent
            counter.finish()
        progress.log(f"{plan.repo_id}: {len(plan.files)} files in {snapshot}")
        snapshots.append(snapshot)
    return snapshots


def _snapshot_folder(cache_dir: Path, plan: DownloadPlan) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return cache_dir / repo_folder_name(repo_id=plan.repo_id, repo_type="model") / "snapshots" / plan.commit


def _use_cancellable_transfers() -> None:
    """Make every transfer report (and so check for cancel) at least every CHUNK_BYTES.

    Xet transfers are switched off: hf_xet reports progress from its own threads, where the JobCancelled our
    progress bar raises cannot stop the transfer, so a cancel would wait for the whole file. Without Xet the
    Hub serves the same files over plain HTTP, which huggingface_hub resumes and we can cancel.
    """
    constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, CHUNK_BYTES)
    constants.HF_HUB_DISABLE_XET = True


def _check_free_space(plans: Sequence[DownloadPlan], cache_dir: Path) -> None:
    free = disk(cache_dir).free
    missing = sum(plan.missing_bytes for plan in plans)
    if missing and free < missing + HEADROOM_BYTES:
        names = ", ".join(plan.repo_id for plan in plans if plan.missing_bytes)
        raise InsufficientResourcesError(
            f"Downloading {names} needs {format_bytes(missing)}, but the disk holding the "
            f"Hugging Face cache ({cache_dir}) has only {format_bytes(free)} free.",
            hint=say("Free some space (Models › Downloaded lists what can be deleted), or {bigger_cache}."),
        )


class _FileCounter:
    """Forwards one file's byte counts from huggingface_hub's progress bar to our Progress.

    Only bytes beyond the furthest point reached are reported, and never more than the file's size: a server
    that ignores a resume request (the file restarts from zero) does not move the overall bar backwards.
    """

    def __init__(self, progress: Progress, repo_id: str, file: RepoFile, *, cached: bool) -> None:
        self._progress = progress
        self._file = file
        self._name = f"model {repo_id}: {file.name}"
        self._cached = cached
        self._position = 0  # where the transfer is now
        self._reported = 0  # the furthest point reported to Progress

    def add(self, nbytes: int, *, transferred: bool = True) -> None:
        """Move the file's position by `nbytes` (negative when the transfer restarts); `transferred` False for
        bytes that were already on disk (a download resumed from an earlier session), which are no speed."""
        self._position = max(0, self._position + nbytes)
        ahead = max(0, min(self._position, self._file.size) - self._reported)
        self._reported += ahead
        label = f"{self._name}: {format_bytes(self._reported)} of {format_bytes(self._file.size)}"
        if transferred:
            self._progress.step(label, units=0, nbytes=ahead)
        else:
            self._progress.skip(label, units=0, nbytes=ahead)

    def finish(self) -> None:
        """Count the file as done; bytes the bar never reported (a blob already in the cache) count now, as done
        work but not as transfer speed."""
        rest = self._file.size - self._reported
        self._reported = self._file.size
        if self._cached:
            self._progress.skip(f"{self._name}: already downloaded", units=1, nbytes=rest)
        else:
            self._progress.step(f"{self._name}: done", units=1, nbytes=rest)

    def bar_class(self) -> type[hub_progress_bar]:
        counter = self

        class _ProgressBar(hub_progress_bar):
            def __init__(self, *args: object, **kwargs: object) -> None:
                kwargs["disable"] = True  # never draw: the window and the CLI draw their own
                super().__init__(*args, **kwargs)
                if self.n:
                    counter.add(int(self.n), transferred=False)  # bytes a resumed download already had

            def update(self, n: float | None = 1) -> bool | None:
                counter.add(int(n or 0))
                return None

        return _ProgressBar
