"""What a model reference in a recipe or a form means: a local folder, or a Hub model `org/name[@revision]`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from guiapp.errors import ModelNotFoundError

# The Hub's own rule for repo ids: an optional namespace, then a name of letters, digits, "-", "_", ".".
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")


@dataclass(frozen=True)
class ModelReference:
    """Exactly one of `folder` (a local model folder) or `repo_id` (a Hub model, at `revision` or main)."""

    text: str
    folder: Path | None = None
    repo_id: str | None = None
    revision: str | None = None

    @property
    def is_local(self) -> bool:
        return self.folder is not None

    @property
    def label(self) -> str:
        """How messages name the model."""
        if self.folder is not None:
            return str(self.folder)
        return f"{self.repo_id}@{self.revision}" if self.revision else str(self.repo_id)


def is_hub_id(text: str) -> bool:
    """True when `text` has the form of a Hub repo id (`name` or `org/name`, without a revision)."""
    return bool(_REPO_ID.match(text))


def split_revision(text: str) -> tuple[str, str | None]:
    """`("org/name", "rev")` from `org/name@rev`, `(text, None)` without a revision. Splits at the first "@":
    repo ids never contain one, branch names may. The one rule for every reference Mergesmith reads."""
    name, _, revision = text.partition("@")
    return name, revision or None


def parse_reference(text: str, revision: str | None = None) -> ModelReference:
    """Read a reference: an existing folder wins; otherwise `org/name` or `org/name@revision` is a Hub model
    (`revision`, when given, replaces the one after "@").

    Raises ModelNotFoundError when the text is neither an existing folder nor a valid Hub id (e.g. a path
    that does not exist).
    """
    cleaned = text.strip()
    path = Path(cleaned).expanduser()
    if path.is_dir():
        return ModelReference(text=text, folder=path.resolve())
    repo_id, written_revision = split_revision(cleaned)
    if is_hub_id(repo_id):
        return ModelReference(text=text, repo_id=repo_id, revision=revision or written_revision or None)
    raise ModelNotFoundError(
        f"'{text}' is not an existing folder and not a Hugging Face model id.",
        hint="Give the path of a model folder, or a Hub id like 'meta-llama/Llama-3.2-1B' (optionally '@revision').",
    )
