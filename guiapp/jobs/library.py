"""The model library as the window's Models page uses it: Hub search, a model's details with its fit on this
machine, the Hugging Face cache (Downloaded) and the added local folders. No Qt.

Every function here may block on the network or the disk: the window awaits them off its own thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guiapp.hub.cache import CachedModel, DeletionPlan, plan_deletion, scan_cache
from guiapp.hub.connection import HubConnection
from guiapp.hub.details import ModelDetails, model_details
from guiapp.hub.headers import bytes_per_element
from guiapp.hub.local_folders import add_local_folder, list_local_folders, remove_local_folder
from guiapp.hub.search import ModelSearch, SearchQuery, SearchResults
from guiapp.system.resources import Fit, fit_verdict
from guiapp.system.units import format_bytes

__all__ = [
    "CachedModel", "DeletionPlan", "DetailsWithFit", "ModelSearch", "SearchQuery", "SearchResults",
    "add_local_folder", "cache_folder", "details_with_fit", "list_local_folders", "plan_deletion",
    "remove_local_folder", "scan_cache", "weights_size",
]


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
