"""What a model reference means: a local folder, or a Hub model `org/name[@revision]`, either optionally
`+adapter` (a LoRA adapter, itself a folder or a Hub model, applied on the fly). The one type every layer passes
around for a model, read once by `ModelRef.parse`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guiapp.errors import CheckpointError, KeyPath, RecipeError, key_path
from guiapp.system.bounded import describe_value
from guiapp.system.paths import expanded, resolved

# The Hub's own rule for repo ids: an optional namespace, then a name of letters, digits, "-", "_", ".".
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")


def is_hub_id(text: str) -> bool:
    """True when `text` has the form of a Hub repo id (`name` or `org/name`, without a revision)."""
    return bool(_REPO_ID.match(text))


def split_revision(text: str) -> tuple[str, str | None]:
    """`("org/name", "rev")` from `org/name@rev`, `(text, None)` without a revision. Splits at the first "@":
    repo ids never contain one, branch names may. The one rule for every reference Mergesmith reads."""
    name, _, revision = text.partition("@")
    return name, revision or None


def _is_folder(text: str) -> bool:
    # os.path.isdir, not Path.is_dir: a name the system cannot look up (too long, a NUL byte) is simply not a folder
    return os.path.isdir(expanded(text))


@dataclass(frozen=True)
class ModelRef:
    """A model: `model` is a folder path as written or a Hub repo id; `revision` the Hub revision (None: main, and
    always None for a folder); `adapter` the LoRA applied to it, if any.

    `folder` is decided once, when the reference is made, by one test: the reference is a local folder when its
    text is an existing folder or cannot be a Hub id (a folder that is missing is reported when it is used, by
    `existing_folder`); otherwise it is a Hub model and `folder` is None.
    """

    model: str
    revision: str | None = None
    adapter: ModelRef | None = None
    folder: Path | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        local = _is_folder(self.model) or not is_hub_id(self.model)
        object.__setattr__(self, "folder", resolved(self.model) if local else None)

    @classmethod
    def parse(cls, text: Any, key: str | KeyPath | None = None) -> ModelRef:
        """Read `org/name`, `org/name@rev`, a folder path, or any of these `+adapter`, by one rule: an existing
        folder is taken whole (its name may hold "@" or "+"); otherwise the text after the last "+" is the adapter,
        and a part whose text before the first "@" is a Hub id has the rest as its revision (anything else is a
        folder path, "@" included). Also takes mergekit's long form `{model: ..., lora: ...}`.

        Raises RecipeError for anything that is not a non-empty string, with `key` (where a recipe holds the text).
        """
        if isinstance(text, dict) and "model" in text:
            inner = cls.parse(text["model"], (*key_path(key), "model"))
            lora = text.get("lora")
            return cls(inner.model, inner.revision, cls.parse(lora, (*key_path(key), "lora")) if lora else inner.adapter)
        if not isinstance(text, str) or not text.strip():
            raise RecipeError(f"{describe_value(text)} is not a model reference.",
                              hint="Use a Hub id like org/name or a local folder path.", key=key)
        text = text.strip()
        if "\0" in text:
            raise RecipeError(f"{describe_value(text)} is not a model reference: it holds a NUL character, which no "
                              "folder or Hub name can hold.", hint="Retype the name or path.", key=key)
        model, plus, adapter = text.rpartition("+")
        if _is_folder(text) or not (plus and model.strip() and adapter.strip()):
            return cls._without_adapter(text)
        return cls._without_adapter(model.strip(), cls._without_adapter(adapter.strip()))

    @classmethod
    def _without_adapter(cls, text: str, adapter: ModelRef | None = None) -> ModelRef:
        name, revision = split_revision(text)
        if revision and not _is_folder(text) and is_hub_id(name):
            return cls(name, revision, adapter)
        return cls(text, None, adapter)

    @property
    def is_local(self) -> bool:
        return self.folder is not None

    @property
    def hub_id(self) -> str | None:
        """The repo id of a Hub model, None for a folder."""
        return None if self.is_local else self.model

    @property
    def short_name(self) -> str:
        """How a column or a chart names the model: the last part of its adapter's folder or repo id when it has
        one (that is what makes it differ), else of its own; `name@revision` for a Hub model at a revision."""
        shown = self.adapter or self
        return re.split(r"[/\\]", str(shown).rstrip("/\\"))[-1] or str(shown)

    @property
    def base(self) -> ModelRef:
        """The model without its adapter."""
        return ModelRef(self.model, self.revision) if self.adapter else self

    def existing_folder(self, what: str = "model") -> Path | None:
        """The folder of a local reference, None for a Hub model.

        Raises CheckpointError when the folder does not exist, naming it as `what` ("model", "adapter").
        """
        if self.folder is None:
            return None
        if not os.path.isdir(self.folder):
            if os.path.islink(expanded(self.model)):
                raise CheckpointError(
                    f"The {what} folder {self.model} is a link that does not lead to a folder: it is broken, or links "
                    "lead back to themselves.",
                    hint="Choose the real folder the link should point to.",
                )
            raise CheckpointError(
                f"The {what} folder {self.folder} does not exist.",
                hint="Check the path, or use a Hub id such as org/name.",
            )
        return self.folder

    def __str__(self) -> str:
        """The reference as written in a recipe (mergekit's syntax)."""
        text = self.model + (f"@{self.revision}" if self.revision else "")
        return text + (f"+{self.adapter}" if self.adapter else "")
