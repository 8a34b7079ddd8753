"""The model library as the window uses it: Hub search, a model's details with its fit on this machine, the
Hugging Face cache, the added local folders, and `library_entries()`, the one list of every model on this
computer (downloaded models with weights, added folders, outputs Mergesmith wrote) that feeds the window's
pickers and its Models page. No Qt.

Every function here may block on the network or the disk: the window awaits them off its own thread.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from guiapp.checkpoints.output_guard import deletable_output, delete_output, read_marker
from guiapp.hub.cache import CachedModel, DeletionPlan, plan_deletion, scan_cache
from guiapp.hub.connection import HubConnection
from guiapp.hub.details import ModelDetails, model_details
from guiapp.hub.headers import bytes_per_element
from guiapp.hub.local_folders import (
    adapter_base,
    add_local_folder,
    add_models_in,
    list_local_folders,
    remove_local_folder,
)
from guiapp.hub.search import ModelSearch, SearchQuery, SearchResults
from guiapp.system.paths import resolved
from guiapp.system.resources import Disk, FitLevel, Memory, fit_verdict
from guiapp.system.units import format_bytes

__all__ = [
    "CachedModel", "DeletionPlan", "DetailsWithFit", "LibraryEntry", "ModelSearch", "SearchQuery", "SearchResults",
    "UseFit", "adapter_base", "add_local_folder", "add_models_in", "cache_folder", "details_with_fit", "downloads_fit",
    "OutputDeletionPlan", "library_entries", "list_local_folders", "module_kinds", "modules_pattern", "plan_deletion",
    "plan_output_deletion",
    "remove_local_folder", "scan_cache", "use_fit", "weights_bytes", "weights_size",
]

# Where an entry comes from, in the words the window shows.
SOURCE_WORDS = {"downloaded": "Downloaded", "folder": "Added folder", "output": "Made by Mergesmith"}
WEIGHT_PATTERNS = ("*.safetensors", "*.bin")


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


def module_kinds(reference: str) -> list[tuple[str, int]]:
    """The kinds of weight matrices in `reference`'s model, by their last name ("q_proj", "down_proj"…) with how
    many there are, in the order the model has them: what a LoRA can be limited to. Reads headers only.

    Raises what reading the headers raises (CheckpointError, the Hub's errors).
    """
    from guiapp.checkpoints.sources import read_headers  # the engine loads torch
    from guiapp.hub.references import ModelRef

    counts: dict[str, int] = {}
    for name, tensor in read_headers(ModelRef.parse(reference)).tensors.items():
        if name.endswith(".weight") and len(tensor.shape) == 2:
            kind = name.removesuffix(".weight").rsplit(".", 1)[-1]
            counts[kind] = counts.get(kind, 0) + 1
    return list(counts.items())


def modules_pattern(kinds: Iterable[str]) -> str:
    """The regular expression matching the modules whose last name is one of `kinds` ("" for none)."""
    import re

    names = sorted(set(kinds))
    return f"(^|\\.)({'|'.join(re.escape(n) for n in names)})$" if names else ""


@dataclass(frozen=True)
class OutputDeletionPlan:
    """Deleting a model or adapter Mergesmith wrote: which folder, what it is, and how much it frees."""

    folder: Path
    description: str  # "an earlier Mergesmith merge output from 2026-11-29 00:51:02 (3 files, 1.2 GB)"
    freed_bytes: int

    def execute(self) -> None:
        """Delete it (OutputError when it changed since it was planned: then nothing is deleted)."""
        delete_output(self.folder)


def plan_output_deletion(folder: Path | str) -> OutputDeletionPlan:
    """Prepare deleting the output Mergesmith wrote in `folder`. Raises OutputError when it is not (or no longer)
    one, or holds files Mergesmith did not write."""
    previous = deletable_output(Path(folder))
    return OutputDeletionPlan(Path(folder), previous.describe(), previous.total_bytes)


def _output_entry(folder: Path) -> LibraryEntry | None:
    marker = read_marker(folder)
    if marker is None:  # moved, deleted, or replaced by something that is not ours
        return None
    return _folder_entry(folder, "output", size=marker.total_bytes)


def _folder_entry(folder: Path, source: str, size: int | None = None) -> LibraryEntry | None:
    folder = resolved(folder)
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


# Float32 copies of the largest tensor a merge or an extraction holds at once (inputs, difference, the method's or
# the decomposition's temporaries, the next tensor read ahead): about five, as guiapp.jobs.estimates measures.
WORKING_COPIES = 5
# Python, torch and the job's threads around the tensors.
PROCESS_BYTES = 450 * 1024 * 1024


@dataclass(frozen=True)
class UseFit:
    """Whether using a Hub model works on this machine, in the terms of what the user will do with it: the
    download against the cache's free disk (nothing, once downloaded), and the memory a merge or an extraction
    of it needs. Jobs stream tensors, so that is a few copies of its largest tensor, not the whole model.
    `working_memory` is None when the model's headers could not be read."""

    download_bytes: int
    downloaded: bool
    disk_free: int
    disk_path: Path
    working_memory: int | None
    largest_tensor: int | None
    ram_total: int
    ram_available: int
    # "4-bit (nf4), dequantized to bfloat16 on read: …" for a quantized model (its working memory counts the
    # dequantized tensors); None for the others or when unknown.
    quantization: str | None = None

    @property
    def disk_level(self) -> FitLevel:
        return self._verdict(0, 0 if self.downloaded else self.download_bytes)

    @property
    def memory_level(self) -> FitLevel:
        return self._verdict(self.working_memory or 0, 0)

    @property
    def level(self) -> FitLevel:
        """The worse of the disk and the memory verdicts (FITS_IN_RAM when both are fine)."""
        return self._verdict(self.working_memory or 0, 0 if self.downloaded else self.download_bytes)

    def _verdict(self, ram_bytes: int, disk_bytes: int) -> FitLevel:
        """The verdict a job's estimate gets (`fit_verdict`) for this much RAM and disk against these numbers."""
        return _verdict(ram_bytes, disk_bytes, self.disk_free, self.disk_path,
                        Memory(total=self.ram_total, available=self.ram_available))

    def badge(self) -> str:
        """One line: the verdict and what it is about ("Fits this machine: 14.5 GB to download, …")."""
        memory = (f"about {format_bytes(self.working_memory)} of memory to merge or extract"
                  if self.working_memory is not None else "")
        download = "downloaded" if self.downloaded else f"{format_bytes(self.download_bytes)} to download"
        if self.disk_level is FitLevel.WILL_NOT_FIT:
            return (f"Not enough disk: {format_bytes(self.download_bytes)} to download, "
                    f"{format_bytes(self.disk_free)} free")
        if self.memory_level is FitLevel.WILL_NOT_FIT:
            return f"Too large to merge here: {memory}, {format_bytes(self.ram_total)} in this machine"
        verdict = "Tight on this machine" if self.level is FitLevel.TIGHT else "Fits this machine"
        return f"{verdict}: {', '.join(part for part in (download, memory) if part)}"

    def details(self) -> str:
        """The numbers behind the badge, for its tooltip."""
        lines = [f"Already in the download cache ({self.disk_path})." if self.downloaded else
                 f"Download: {format_bytes(self.download_bytes)} into {self.disk_path}, where "
                 f"{format_bytes(self.disk_free)} is free."]
        if self.working_memory is None:
            lines.append("Memory: unknown until its files' headers can be read.")
        else:
            lines.append(f"Memory: merging or extracting reads the model tensor by tensor, so it needs about "
                         f"{format_bytes(self.working_memory)} (its largest tensor, {format_bytes(self.largest_tensor)}"
                         f" in float32, a few times over), of {format_bytes(self.ram_available)} available "
                         f"({format_bytes(self.ram_total)} in all).")
        return "\n".join(lines)


@dataclass(frozen=True)
class DetailsWithFit:
    """A Hub model's details and whether using it fits this machine (None when that cannot be told)."""

    details: ModelDetails
    fit: UseFit | None


def details_with_fit(repo_id: str) -> DetailsWithFit:
    """`repo_id`'s details (one Hub request), then its fit: the download against the cache's disk, and the
    working memory from its headers (range requests, cached for the jobs that follow). Raises the Hub's errors
    (ModelNotFoundError, OfflineError…) for the details; a fit that cannot be told is None, not an error."""
    details = model_details(repo_id)
    return DetailsWithFit(details, use_fit(details))


def use_fit(details: ModelDetails) -> UseFit | None:
    """Whether downloading and merging `details`' model fits this machine; None when the machine's disk or memory
    cannot be examined."""
    from guiapp.system.resources import disk, memory

    try:
        space, ram = disk(cache_folder()), memory()
    except Exception:  # no badge rather than no details
        return None
    largest, quantization = header_facts(f"{details.repo_id}@{details.commit}" if details.commit else details.repo_id)
    downloaded = any(model.repo_id == details.repo_id and any(r.commit == details.commit for r in model.revisions)
                     and _weight_files(model.revisions[0].folder) for model in _cached_models())
    return UseFit(details.download_size, downloaded, space.free, space.path,
                  None if largest is None else WORKING_COPIES * largest + PROCESS_BYTES, largest, ram.total,
                  ram.available, quantization)


def downloads_fit(sizes: Iterable[int]) -> list[FitLevel | None]:
    """For download sizes in bytes (search results), whether each fits the cache's free disk; None for a size
    that is not known (0) or when the disk cannot be examined."""
    from guiapp.system.resources import disk

    sizes = list(sizes)
    try:
        free = disk(cache_folder()).free
    except Exception:  # no fit column rather than no results
        return [None] * len(sizes)
    return [_verdict(0, size, free, cache_folder()) if size else None for size in sizes]


def _verdict(ram_bytes: int, disk_bytes: int, disk_free: int, disk_path: Path, ram: Memory | None = None) -> FitLevel:
    """`fit_verdict`'s level for a CPU job of `ram_bytes` writing `disk_bytes` where `disk_free` bytes are free (and
    `ram`: any, when `ram_bytes` is 0)."""
    return fit_verdict(ram_bytes, 0, disk_bytes, "cpu", disk_path, ram=ram or Memory(total=1, available=1),
                       space=Disk(path=disk_path, free=disk_free, total=disk_free)).level


def header_facts(reference: str) -> tuple[int | None, str | None]:
    """The largest tensor of `reference`'s model in float32 bytes (dequantized, for a quantized model) and what
    its quantization is (`Quantization.summary`), from its headers; None for what cannot be read (no
    safetensors, offline)."""
    from guiapp.checkpoints.sources import read_headers  # the engine loads torch
    from guiapp.hub.references import ModelRef

    try:
        headers = read_headers(ModelRef.parse(reference))
    except Exception:  # the details still show; the memory is "unknown"
        return None, None
    quantization = headers.quantization.summary() if headers.quantization else None
    return max((math.prod(t.shape) * 4 for t in headers.tensors.values()), default=0), quantization


def _cached_models() -> list[CachedModel]:
    try:
        return scan_cache()
    except Exception:  # an unreadable cache: nothing counts as downloaded
        return []


def cache_folder() -> Path:
    """The Hugging Face cache folder in use."""
    return HubConnection.current().cache_dir


def weights_size(parameters_by_dtype: dict[str, int]) -> str:
    """The size of the weights ("14.5 GB") from the parameter counts by dtype; "" when the Hub gives none."""
    return format_bytes(weights_bytes(parameters_by_dtype)) if parameters_by_dtype else ""


def weights_bytes(parameters_by_dtype: dict[str, int]) -> int:
    """The bytes of the weights from the parameter counts by dtype (0 when the Hub gives none)."""
    # A dtype code the table does not know is counted as 2 bytes, the most common size.
    return sum(count * (bytes_per_element(dtype) or 2) for dtype, count in parameters_by_dtype.items())
