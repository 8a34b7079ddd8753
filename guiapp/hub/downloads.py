"""Download the files a merge needs into the standard Hugging Face cache, with progress, cancel and resume.

Files go through `hf_hub_download`, so other tools (transformers, mergekit, vLLM) find them in the same cache.
Progress and cancel ride on its `tqdm_class` hook: the bar it creates for each file reports every chunk to our
`Progress`, whose `step` raises JobCancelled once the user cancels. huggingface_hub resumes a file by itself
(HTTP Range) when the connection drops mid-file; a cancelled file leaves no partial data behind.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.utils import tqdm as hub_progress_bar

from guiapp.errors import CheckpointError, InsufficientResourcesError
from guiapp.hub.connection import HubConnection, require_online
from guiapp.hub.details import RepoFile, model_details
from guiapp.hub.failures import hub_errors
from guiapp.progress import Progress
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
    from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415

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

    Reports the stage "Downloading": files done of total, bytes, rate and ETA; `item` names the current file
    and how far it is. Raises JobCancelled when cancelled (finished files stay in the cache); before any
    transfer, CheckpointError when the repo has no weights and InsufficientResourcesError when the disk is too
    small; GatedModelError, ModelNotFoundError, RevisionNotFoundError, OfflineError, RateLimitedError and
    ConnectionLostError for Hub failures.
    """
    from huggingface_hub import hf_hub_download  # noqa: PLC0415
    from huggingface_hub.file_download import repo_folder_name  # noqa: PLC0415

    require_online(f"Downloading {repo_id}")
    connection = connection or HubConnection.current()
    progress = progress or Progress()
    plan = plan_download(repo_id, revision, connection=connection)
    if not any(f.name.endswith((".safetensors", ".bin")) for f in plan.files):
        raise CheckpointError(
            f"{repo_id} has no model weights Mergesmith can use (no .safetensors or .bin files at its top level).",
            hint=f"Check its files on {connection.model_page(repo_id)}; it may hold another format (GGUF, ONNX).",
        )
    _check_free_space(plan, connection.cache_dir)
    _use_cancellable_transfers()

    progress.start_stage("Downloading", total=len(plan.files), bytes_total=plan.total_bytes)
    snapshot = connection.cache_dir / repo_folder_name(repo_id=repo_id, repo_type="model") / "snapshots" / plan.commit
    for file in plan.files:
        # Cached files go through hf_hub_download too: it only checks them (one HEAD request) and records the
        # requested branch or tag in the cache, so that `org/name@tag` also resolves offline later.
        counter = _FileCounter(progress, file)
        with hub_errors(repo_id, plan.revision):
            path = hf_hub_download(
                repo_id,
                file.name,
                revision=plan.revision,
                cache_dir=connection.cache_dir,
                endpoint=connection.endpoint,
                tqdm_class=counter.bar_class(),
            )
        snapshot = Path(path).parent
        counter.finish()
    progress.log(f"{repo_id}: {len(plan.files)} files in {snapshot}")
    return snapshot


def _use_cancellable_transfers() -> None:
    """Make every transfer report (and so check for cancel) at least every CHUNK_BYTES.

    Xet transfers are switched off: hf_xet reports progress from its own threads, where the JobCancelled our
    progress bar raises cannot stop the transfer, so a cancel would wait for the whole file. Without Xet the
    Hub serves the same files over plain HTTP, which huggingface_hub resumes and we can cancel.
    """
    constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, CHUNK_BYTES)
    constants.HF_HUB_DISABLE_XET = True


def _check_free_space(plan: DownloadPlan, cache_dir: Path) -> None:
    existing = next(p for p in (cache_dir, *cache_dir.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    needed = plan.missing_bytes + HEADROOM_BYTES
    if plan.missing_bytes and free < needed:
        raise InsufficientResourcesError(
            f"Downloading {plan.repo_id} needs {format_bytes(plan.missing_bytes)}, but the disk holding the "
            f"Hugging Face cache ({cache_dir}) has only {format_bytes(free)} free.",
            hint="Free some space (Models › Downloaded lists what can be deleted), or set HF_HOME to a bigger disk.",
        )


class _FileCounter:
    """Forwards one file's byte counts from huggingface_hub's progress bar to our Progress."""

    def __init__(self, progress: Progress, file: RepoFile) -> None:
        self._progress = progress
        self._file = file
        self._done = 0

    def add(self, nbytes: int) -> None:
        # nbytes is negative when a server ignored a resume request and the file restarts from zero.
        self._done += nbytes
        label = f"{self._file.name}: {format_bytes(self._done)} of {format_bytes(self._file.size)}"
        self._progress.step(label, units=0, nbytes=nbytes)

    def finish(self) -> None:
        """Count the file as done; bytes the bar never reported (a blob already in the cache) count now."""
        self._progress.step(f"{self._file.name}: done", units=1, nbytes=self._file.size - self._done)
        self._done = self._file.size

    def bar_class(self) -> type[hub_progress_bar]:
        counter = self

        class _ProgressBar(hub_progress_bar):
            def __init__(self, *args: object, **kwargs: object) -> None:
                kwargs["disable"] = True  # never draw: the window and the CLI draw their own
                super().__init__(*args, **kwargs)
                if self.n:
                    counter.add(int(self.n))  # bytes a resumed download already had

            def update(self, n: float | None = 1) -> bool | None:
                counter.add(int(n or 0))
                return None

        return _ProgressBar
