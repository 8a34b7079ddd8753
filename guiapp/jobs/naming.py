"""Short names for model references (a Hub id's repo name, a local folder's name) and output folders made unique
in their folder with `-2`, `-3`."""

from __future__ import annotations

import re
from pathlib import Path

from guiapp.checkpoints.output_guard import free_destination
from guiapp.hub.references import ModelRef

# Each name is kept short, so it stays readable and far inside every file system's limit.
_PART_CHARACTERS = 48
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def input_name(reference: str) -> str:
    """The short name of a model reference: "org/tiny-chat", "/models/tiny-chat/" and "org/tiny-chat@v2" give
    "tiny-chat" (of `model+adapter`, the model's). Characters a folder name should not hold become "-"; an empty
    result gives "model"."""
    text = str(reference).strip().rstrip("/\\")
    name = re.split(r"[/\\]", ModelRef.parse(text).model)[-1] if text else ""
    name = _UNSAFE.sub("-", name).strip("-.")[:_PART_CHARACTERS].strip("-.")
    return name or "model"


def default_output(folder: Path | str, name: str) -> Path:
    """`folder`/`name`, or `name-2`, `name-3`… when that is taken (see `free_destination`); nothing is created."""
    return free_destination(Path(folder) / name)
