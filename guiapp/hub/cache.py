"""The models in the Hugging Face cache: what is there, how big, when last used, and deleting it.

Uses huggingface_hub's own `scan_cache_dir` and its delete strategy, so the cache stays consistent for every
other tool that shares it. Works offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guiapp.errors import ModelNotFoundError
from guiapp.facts.wording import say
from guiapp.hub.connection import HubConnection

if TYPE_CHECKING:
    from huggingface_hub import DeleteCacheStrategy, HFCacheInfo


@dataclass(frozen=True)
class CachedRevision:
    commit: str
    refs: tuple[str, ...]
    size: int
    folder: Path


@dataclass(frozen=True)
class CachedModel:
    repo_id: str
    size: int
    files: int
    last_used: datetime
    last_modified: datetime
    revisions: tuple[CachedRevision, ...]
    folder: Path

    def to_json(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "size": self.size,
            "files": self.files,
            "last_used": self.last_used.isoformat(),
            "last_modified": self.last_modified.isoformat(),
            "revisions": [
                {"commit": r.commit, "refs": list(r.refs), "size": r.size, "folder": str(r.folder)}
                for r in self.revisions
            ],
            "folder": str(self.folder),
        }


@dataclass(frozen=True)
class DeletionPlan:
    """What deleting will remove; nothing happens until `execute()`."""

    repo_id: str
    commits: tuple[str, ...]
    freed_bytes: int
    _strategy: DeleteCacheStrategy

    def execute(self) -> None:
        """Delete the files (blobs shared with revisions that stay are kept)."""
        self._strategy.execute()


def scan_cache(connection: HubConnection | None = None) -> list[CachedModel]:
    """The cached models, most recently used first ([] when there is no cache yet).

    Raises nothing for a missing cache; cache entries huggingface_hub cannot understand are skipped by it.
    """
    info = _scan(connection)
    if info is None:
        return []
    models = [
        CachedModel(
            repo_id=repo.repo_id,
            size=repo.size_on_disk,
            files=repo.nb_files,
            last_used=_time(repo.last_accessed),
            last_modified=_time(repo.last_modified),
            revisions=tuple(
                CachedRevision(r.commit_hash, tuple(sorted(r.refs)), r.size_on_disk, r.snapshot_path)
                for r in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True)
            ),
            folder=repo.repo_path,
        )
        for repo in info.repos
        if repo.repo_type == "model"
    ]
    return sorted(models, key=lambda m: m.last_used, reverse=True)


def plan_deletion(
    repo_id: str, commits: Sequence[str] | None = None, *, connection: HubConnection | None = None
) -> DeletionPlan:
    """Prepare deleting `repo_id` from the cache (all its revisions, or only `commits`) and say how much it frees.

    Raises ModelNotFoundError when the model (or a given commit) is not in the cache.
    """
    info = _scan(connection)
    repo = next((r for r in (info.repos if info else ()) if r.repo_type == "model" and r.repo_id == repo_id), None)
    if repo is None:
        raise ModelNotFoundError(
            f"{repo_id} is not in the download cache.", hint=say("{cache_list} lists the downloaded models.")
        )
    known = {r.commit_hash for r in repo.revisions}
    chosen = tuple(commits) if commits else tuple(sorted(known))
    unknown = [c for c in chosen if c not in known]
    if unknown:
        raise ModelNotFoundError(f"{repo_id} has no cached revision {', '.join(unknown)}.")
    strategy = info.delete_revisions(*chosen)  # type: ignore[union-attr]
    return DeletionPlan(repo_id, chosen, strategy.expected_freed_size, strategy)


def _scan(connection: HubConnection | None) -> HFCacheInfo | None:
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        return scan_cache_dir((connection or HubConnection.current()).cache_dir)
    except CacheNotFound:
        return None


def _time(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)
