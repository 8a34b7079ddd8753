"""The model library as the window uses it: Hub search, a model's details with its fit on this machine, the
Hugging Face cache, the added local folders, and `library_entries()`, the one list of every model on this
computer (downloaded models with weights, added folders, outputs Mergesmith wrote) that feeds the window's
pickers and its Models page. No Qt.

Every function here may block on the network or the disk: the window awaits them off its own thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guiapp.engine.output_guard import read_marker
from guiapp.hub.cache import CachedModel, DeletionPlan, plan_deletion, scan_cache
from guiapp.hub.connection import HubConnection
from guiapp.hub.details import ModelDetails, model_details
from guiapp.hub.headers import bytes_per_element
from guiapp.hub.local_folders import add_local_folder, list_local_folders, remove_local_folder
from guiapp.hub.search import ModelSearch, SearchQuery, SearchResults
from guiapp.system.resources import Fit, fit_verdict
from guiapp.system.units import format_bytes

__all__ = [
    "CachedModel", "DeletionPlan", "DetailsWithFit", "LibraryEntry", "ModelSearch", "SearchQuery", "SearchResults",
    "adapter_base", "add_local_folder", "module_kinds", "modules_pattern", "cache_folder", "details_with_fit", "library_entries", "list_local_folders",
    "plan_deletion", "remove_local_folder", "scan_cache", "weights_size",
]

# Where an entry comes from, in the words the window shows.
SOURCE_WORDS = {"downloaded": "Downloaded", "folder": "Added folder", "output": "Made by Mergesmith"}
WEIGHT_PATTERNS = ("*.safetensors", "*.bin")
# An adapter_config.json is a few hundred bytes; a far larger one is not read.
_MAX_ADAPTER_CONFIG_BYTES = 1_000_000


@dataclass(frozen=True)
class LibraryEntry:
    """One model on this computer. `reference` is what a recipe or job takes (a Hub id or a folder); `kind` is
    "model" or "adapter"; `base_model` is the model an adapter says it was made for."""

    reference: str
    name: str
    source: str  # "downloaded", "folder" or "output" (SOURCE_WORDS)
    kind: str
    size: int
    folder: Path
    modified: float
    base_model: str | None = None

    @property
    def where(self) -> str:
        return SOURCE_WORDS[self.source]


def library_entries(outputs: Iterable[Path | str] = ()) -> list[LibraryEntry]:
    """Every model on this computer: the outputs in `outputs` that still hold Mergesmith's marker (newest job
    first, as given), the added local folders that still exist, then the Hugging Face cache's models whose newest
    snapshot holds weights (an entry holding only a config or headers, left by a look at a Hub model, is not a
    model). A folder is listed once. An unreadable cache leaves the other entries; nothing here raises."""
    entries: list[LibraryEntry] = []
    seen: set[Path] = set()

    def add(entry: LibraryEntry | None) -> None:
        if entry is not None and entry.folder not in seen:
            seen.add(entry.folder)
            entries.append(entry)

    for output in outputs:
        add(_output_entry(Path(output)))
    for folder in list_local_folders():
        add(_folder_entry(folder, "folder"))
    try:
        cached = scan_cache()
    except Exception:  # an unreadable cache folder: the local entries still work
        cached = []
    for model in cached:
        add(_cache_entry(model))
    return entries


def adapter_base(folder: Path | str) -> str | None:
    """The base model an adapter folder says it was made for (adapter_config.json's base_model_name_or_path);
    None when `folder` is not an adapter or does not name one."""
    config = Path(folder) / "adapter_config.json"
    try:
        if config.stat().st_size > _MAX_ADAPTER_CONFIG_BYTES:
            return None
        base = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    return base if isinstance(base, str) and base.strip() else None


def module_kinds(reference: str) -> list[tuple[str, int]]:
    """The kinds of weight matrices in `reference`'s model, by their last name ("q_proj", "down_proj"…) with how
    many there are, in the order the model has them: what a LoRA can be limited to. Reads headers only.

    Raises what reading the headers raises (CheckpointError, the Hub's errors).
    """
    from guiapp.engine.sources import read_headers  # noqa: PLC0415 - the engine loads torch
    from guiapp.hub.references import ModelRef  # noqa: PLC0415

    counts: dict[str, int] = {}
    for name, tensor in read_headers(ModelRef.parse(reference)).tensors.items():
        if name.endswith(".weight") and len(tensor.shape) == 2:
            kind = name.removesuffix(".weight").rsplit(".", 1)[-1]
            counts[kind] = counts.get(kind, 0) + 1
    return list(counts.items())


def modules_pattern(kinds: Iterable[str]) -> str:
    """The regular expression matching the modules whose last name is one of `kinds` ("" for none)."""
    import re  # noqa: PLC0415

    names = sorted(set(kinds))
    return f"(^|\\.)({'|'.join(re.escape(n) for n in names)})$" if names else ""


def _output_entry(folder: Path) -> LibraryEntry | None:
    marker = read_marker(folder)
    if marker is None:  # moved, deleted, or replaced by something that is not ours
        return None
    return _folder_entry(folder, "output", size=marker.total_bytes)


def _folder_entry(folder: Path, source: str, size: int | None = None) -> LibraryEntry | None:
    folder = Path(folder).expanduser().resolve()
    weights = _weight_files(folder)
    if not weights:
        return None
    try:
        modified = max(path.stat().st_mtime for path in weights)
        size = size if size is not None else sum(path.stat().st_size for path in weights)
    except OSError:
        return None
    base = adapter_base(folder)
    kind = "adapter" if (folder / "adapter_config.json").is_file() else "model"
    return LibraryEntry(str(folder), folder.name, source, kind, size, folder, modified, base)


def _cache_entry(model: CachedModel) -> LibraryEntry | None:
    if not model.revisions:
        return None
    snapshot = model.revisions[0].folder  # the newest revision: what a job given the id would use offline
    if not _weight_files(snapshot):
        return None
    kind = "adapter" if (snapshot / "adapter_config.json").is_file() else "model"
    return LibraryEntry(model.repo_id, model.repo_id, "downloaded", kind, model.size, Path(model.folder),
                        model.last_used.timestamp(), adapter_base(snapshot) if kind == "adapter" else None)


def _weight_files(folder: Path) -> list[Path]:
    try:
        return [path for pattern in WEIGHT_PATTERNS for path in folder.glob(pattern) if path.is_file()]
    except OSError:
        return []


@dataclass(frozen=True)
class DetailsWithFit:
    """A Hub model's details and whether its download fits this machine (None when that cannot be told)."""

    details: ModelDetails
    fit: Fit | None


def details_with_fit(repo_id: str, probe: Any) -> DetailsWithFit:
    """`repo_id`'s details (one Hub request) and its fit: against the GPU when the probe found one, else RAM, and
    the cache's disk. Raises the Hub's errors (ModelNotFoundError, OfflineError…) for the details."""
    details = model_details(repo_id)
    return DetailsWithFit(details, model_fit(details.download_size, probe))


def model_fit(size: int, probe: Any) -> Fit | None:
    """Whether a model of `size` bytes fits this machine; None when the machine cannot be examined."""
    gpu = next((d["id"] for d in (probe.devices if probe else []) if d["kind"] != "cpu"), None)
    try:
        return fit_verdict(size, size, size, gpu or "cpu", cache_folder())
    except Exception:  # no badge rather than no details
        return None


def cache_folder() -> Path:
    """The Hugging Face cache folder in use."""
    return HubConnection.current().cache_dir


def weights_size(parameters_by_dtype: dict[str, int]) -> str:
    """The size of the weights ("14.5 GB") from the parameter counts by dtype; "" when the Hub gives none."""
    if not parameters_by_dtype:
        return ""
    # A dtype code the table does not know is counted as 2 bytes, the most common size.
    return format_bytes(sum(count * (bytes_per_element(dtype) or 2) for dtype, count in parameters_by_dtype.items()))
