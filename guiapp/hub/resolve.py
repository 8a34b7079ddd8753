"""Model references for the engine: a local folder, or a Hub model made local (downloading what is missing),
and header-only metadata (tensor names, shapes, dtypes and config.json) without downloading any weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guiapp.errors import CheckpointError, OfflineError
from guiapp.hub.adapter_config import ADAPTER_CONFIG, read_adapter_config
from guiapp.hub.connection import HubConnection, is_offline
from guiapp.hub.details import remote_tensors
from guiapp.hub.downloads import download_models
from guiapp.hub.failures import hub_errors
from guiapp.hub.headers import TensorRecord, read_folder_headers
from guiapp.hub.model_config import CONFIG_FILE, read_model_config
from guiapp.hub.references import ModelRef
from guiapp.progress import Progress

CONFIG_FILES = ("config.json", ADAPTER_CONFIG)


@dataclass(frozen=True)
class ModelMetadata:
    """What validation needs to know about a model: its tensors (from headers) and its config."""

    reference: ModelRef
    tensors: dict[str, TensorRecord]
    config: dict[str, Any]


def resolve_model(ref: ModelRef, *, progress: Progress | None = None, offline: bool = False,
                  what: str = "model") -> Path:
    """The local folder holding the model `ref` names (its adapter, if any, is not looked at).

    The one-model case of `resolve_models`, with its errors; `what` ("model", "adapter") is what they call it.
    """
    return resolve_models([ref], progress=progress, offline=offline, what=what)[0]


def resolve_models(refs: Sequence[ModelRef], *, progress: Progress | None = None, offline: bool = False,
                   what: str = "model") -> list[Path]:
    """The local folders holding the models `refs` name, in order (adapters are not looked at: pass them as
    references of their own).

    A local folder is returned as it is. Hub models are downloaded into the HF cache as needed (only the files a
    merge needs), all in one "Downloading" stage whose bar counts every model's files from the start, and their
    snapshot folders returned. Offline (`offline=True`, Mergesmith's offline switch, or HF_HUB_OFFLINE) only the
    cache is used. Raises CheckpointError for a folder that does not exist (calling it a `what`), OfflineError
    naming the model when offline and it is not fully downloaded, and the download errors of `download_models`
    (ModelNotFoundError, RevisionNotFoundError…).
    """
    folders: dict[int, Path] = {}
    from_hub: dict[tuple[str, str | None], list[int]] = {}
    for position, ref in enumerate(refs):
        folder = ref.existing_folder(what)
        if folder is not None:
            folders[position] = folder
        elif offline or is_offline():
            folders[position] = _cached_snapshot(ref)
        else:
            from_hub.setdefault((ref.model, ref.revision), []).append(position)
    if from_hub:
        snapshots = download_models(list(from_hub), progress=progress)
        for positions, snapshot in zip(from_hub.values(), snapshots, strict=True):
            folders.update(dict.fromkeys(positions, snapshot))
    return [folders[position] for position in range(len(refs))]


def resolve_tokenizer(ref: ModelRef, *, offline: bool = False, required: bool = True) -> Path:
    """The folder holding the tokenizer of the model `ref` names, for a model that lends only its tokenizer
    to a merge (`tokenizer_source`) or whose vocabulary is read while planning: a local folder as it is; of a Hub
    repo only the tokenizer files are fetched into the HF cache (from the cache alone when offline).

    Raises CheckpointError when the folder does not exist or (when `required`) the repo has no tokenizer.json,
    OfflineError when offline and the files are not cached, and the Hub errors of `hub_errors`
    (ModelNotFoundError, GatedModelError…).
    """
    from huggingface_hub import snapshot_download

    from guiapp.hub.merge_files import TOKENIZER_FILES

    folder = ref.existing_folder()
    if folder is not None:
        return folder
    connection = HubConnection.current()
    local_only = offline or is_offline()
    with hub_errors(ref.model, ref.revision):
        folder = Path(snapshot_download(ref.model, revision=ref.revision, allow_patterns=sorted(TOKENIZER_FILES),
                                        cache_dir=connection.cache_dir, endpoint=connection.endpoint,
                                        local_files_only=local_only))
    if required and not (folder / "tokenizer.json").is_file():
        raise CheckpointError(
            f"{ref} has no tokenizer.json, so its vocabulary cannot be read.",
            hint="Choose a model that ships tokenizer.json (the fast-tokenizer file most models have).",
        )
    return folder


def read_model_metadata(ref: ModelRef, *, offline: bool = False) -> ModelMetadata:
    """Tensor names, shapes and dtypes plus config.json of the model `ref` names, without its weights (its
    adapter, if any, is not looked at).

    Local folders are read from disk; Hub models through HTTP range requests of the safetensors headers
    (config.json, being small, is downloaded into the cache), or from the cache when offline. Raises
    CheckpointError when the folder does not exist or there are no readable safetensors or no config,
    OfflineError when offline and the model is not in the cache, and the Hub errors of `remote_tensors`.
    """
    folder = ref.existing_folder()
    if folder is not None:
        return ModelMetadata(ref, read_folder_headers(folder), _read_config(folder, str(ref)))
    if offline or is_offline():
        folder = _cached_snapshot(ref)
        return ModelMetadata(ref, read_folder_headers(folder), _read_config(folder, str(ref)))
    tensors = remote_tensors(ref.model, ref.revision)
    return ModelMetadata(ref, tensors, _download_config(ref))


def _cached_snapshot(ref: ModelRef) -> Path:
    """The complete cached snapshot of a Hub reference, or OfflineError naming the model."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    missing = OfflineError(
        f"{ref} is not downloaded, and Mergesmith is working offline.",
        hint="Go online and download it once (Models › Download); afterwards it works offline. "
        "Or use a local folder that holds the model.",
    )
    connection = HubConnection.current()
    try:
        folder = Path(
            snapshot_download(ref.model, revision=ref.revision, cache_dir=connection.cache_dir, local_files_only=True)
        )
    except LocalEntryNotFoundError as error:
        raise missing from error
    has_weights = any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))
    if not has_weights or not any((folder / name).is_file() for name in CONFIG_FILES):
        raise missing
    return folder


def _read_config(folder: Path, label: str) -> dict[str, Any]:
    """config.json through the one checked reader of model configs, or for an adapter its adapter_config.json
    through the adapters' one checked reader."""
    if (folder / CONFIG_FILE).is_file():
        return read_model_config(folder / CONFIG_FILE)
    if (folder / ADAPTER_CONFIG).is_file():
        return read_adapter_config(folder).document
    raise CheckpointError(
        f"{label} has no config.json, so its architecture is unknown.",
        hint="Choose a folder with a complete model (config.json next to the weights).",
    )


def _download_config(ref: ModelRef) -> dict[str, Any]:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    connection = HubConnection.current()
    with hub_errors(ref.model, ref.revision):
        for name in CONFIG_FILES:
            try:
                path = hf_hub_download(
                    ref.model,
                    name,
                    revision=ref.revision,
                    cache_dir=connection.cache_dir,
                    endpoint=connection.endpoint,
                )
            except EntryNotFoundError:
                continue
            return _read_config(Path(path).parent, str(ref))
    raise CheckpointError(
        f"{ref} has no config.json on the Hub, so its architecture is unknown.",
        hint="Choose a model in transformers format (with config.json).",
    )
