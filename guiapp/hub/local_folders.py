"""Model folders the user added to the library: any folder with a config and safetensors weights (or an
adapter), usable in every job like a Hub id. The list lives in `local_folders.json` in Mergesmith's config
folder; the folders themselves are never touched.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from guiapp.errors import CheckpointError, MergesmithError
from guiapp.hub.adapter_config import read_adapter_config
from guiapp.system.bounded import JSON_BYTES, load_json_limited
from guiapp.system.paths import resolved, settings_file

SETTINGS_NAME = "local_folders.json"
# Entries of a chosen folder looked at for model folders inside it (a folder of models, chosen once).
SUBFOLDERS_SCANNED = 1000


def adapter_base(folder: Path | str) -> str | None:
    """The base model an adapter folder says it was made for (adapter_config.json's base_model_name_or_path);
    None when `folder` is not an adapter (or its configuration cannot be read) or does not name one."""
    try:
        return read_adapter_config(folder).base_model
    except MergesmithError:
        return None


def list_local_folders() -> list[Path]:
    """The added folders in the order they were added (an unreadable settings file counts as an empty list)."""
    path = settings_file(SETTINGS_NAME)
    try:
        entries = load_json_limited(path, JSON_BYTES, MergesmithError, what="folder list").get("folders", [])
    except (MergesmithError, AttributeError):
        return []
    return [Path(entry) for entry in entries if isinstance(entry, str)]


def is_model_folder(folder: Path) -> bool:
    """Whether `folder` holds a model or an adapter: config.json (or adapter_config.json) next to .safetensors or
    .bin weights."""
    has_config = (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file()
    return has_config and (any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")))


def add_local_folder(folder: Path) -> Path:
    """Add `folder` to the library (once) and return its absolute path.

    Raises CheckpointError when it is not a folder or holds no model (config.json or adapter_config.json next
    to .safetensors or .bin weights).
    """
    folder = resolved(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder.", hint="Choose the folder that contains config.json.")
    if not is_model_folder(folder):
        raise CheckpointError(
            f"{folder} does not look like a model folder: it needs config.json (or adapter_config.json) and weights.",
            hint="Choose the folder that holds both the config and the .safetensors files.",
        )
    folders = list_local_folders()
    if folder not in folders:
        _save(folders + [folder])
    return folder


def add_models_in(folder: Path) -> list[Path]:
    """Add `folder` when it is a model folder, otherwise every model folder directly inside it (a folder where
    the user keeps their models, chosen once). Returns the folders added, in name order.

    Raises CheckpointError when `folder` is not a folder, or neither is nor holds a model folder.
    """
    folder = resolved(folder)
    if not folder.is_dir() or is_model_folder(folder):
        return [add_local_folder(folder)]
    try:
        with os.scandir(folder) as entries:
            names = sorted(entry.name for _, entry in zip(range(SUBFOLDERS_SCANNED), entries))
    except OSError as error:
        raise CheckpointError(f"{folder} cannot be read: {error.strerror}.",
                              hint="Choose a folder you can open.") from error
    inside = [resolved(folder / name) for name in names
              if (folder / name).is_dir() and is_model_folder(folder / name)]
    if not inside:
        raise CheckpointError(
            f"{folder} does not look like a model folder, and none of the folders in it does: a model folder needs "
            "config.json (or adapter_config.json) and weights.",
            hint="Choose a model's folder (the one with config.json and the .safetensors files), or the folder "
                 "that holds your model folders.",
        )
    folders = list_local_folders()
    _save(folders + [f for f in inside if f not in folders])
    return inside


def remove_local_folder(folder: Path) -> None:
    """Forget `folder` (its files stay where they are); forgetting an unknown folder does nothing."""
    folder = resolved(folder)
    _save([f for f in list_local_folders() if f != folder])


def _save(folders: list[Path]) -> None:
    path = settings_file(SETTINGS_NAME)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a crash never leaves half a settings file.
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".local_folders.", suffix=".tmp")
    with os.fdopen(handle, "w") as stream:
        json.dump({"folders": [str(f) for f in folders]}, stream, indent=2)
    os.replace(temporary, path)
