"""Default output names that say what a folder holds: `tiny-chat+tiny-code-ties`, `tiny-chat-lora-r32`,
`tiny-base+tiny-chat-lora-r32-applied`, made unique in their folder with `-2`, `-3`.

A name is built from the inputs' own names (a Hub id's repo name, a local folder's name), so a user who opens the
output folder later recognises each result without a log.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from guiapp.checkpoints.output_guard import free_destination
from guiapp.hub.references import ModelRef

# Names beyond these are summarised ("a+b+c+2-more-ties"), and each part is kept short, so a name stays readable
# and far inside every file system's limit.
_NAMED_INPUTS = 3
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


def merge_output_name(models: Sequence[str], method: str, base: str | None = None) -> str:
    """"tiny-chat+tiny-code-ties": the merged models (the base only when nothing else is merged) and the method."""
    names = [input_name(m) for m in models if base is None or m != base] or ([input_name(base)] if base else [])
    if len(names) > _NAMED_INPUTS:
        names = [*names[:_NAMED_INPUTS], f"{len(names) - _NAMED_INPUTS}-more"]
    return "+".join([*(names or ["merge"])]) + f"-{input_name(method)}"


def extraction_output_name(model: str, rank: int | None = None) -> str:
    """"tiny-chat-lora-r32" for a fixed rank; "tiny-chat-lora" when the rank is chosen per module."""
    return f"{input_name(model)}-lora" + (f"-r{rank}" if rank else "")


def application_output_name(base: str, adapter: str) -> str:
    """"tiny-base+tiny-chat-lora-r32-applied": the base and the adapter applied to it."""
    return f"{input_name(base)}+{input_name(adapter)}-applied"


def default_output(folder: Path | str, name: str) -> Path:
    """`folder`/`name`, or `name-2`, `name-3`… when that is taken (see `free_destination`); nothing is created."""
    return free_destination(Path(folder) / name)
