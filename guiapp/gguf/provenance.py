"""What a GGUF file records of how it was made, written by the export and read back for its model card.

The record lives in the file's own metadata, under the keys llama.cpp's converter uses for the same facts
(`general.source.repo_url`, `general.base_model.N.*`) and one key of Mergesmith's (`mergesmith.exported_with`):
it travels with the file when it is copied or renamed, LM Studio and the Hub show it, and the export stays one
file renamed into place whole. Only Hub ids are recorded, never a path on this computer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf

from guiapp.errors import CheckpointError
from guiapp.hub.publish_card import base_models
from guiapp.hub.references import ModelRef

EXPORTED_WITH = "mergesmith.exported_with"
# How llama.cpp's converter writes a Hub model's address; a mirror serves the same ids.
_REPO_URL = "https://huggingface.co/"


@dataclass(frozen=True)
class MadeFrom:
    """The Hub model a file was exported from (None: a folder here, or a base with an adapter applied) and the
    Hub models that one was made from (a merge's inputs, an adapter's base, the base and the adapter)."""

    source: str | None = None
    base_models: list[str] = field(default_factory=list)


def made_from(ref: ModelRef, folder: Path | None) -> MadeFrom:
    """What `ref` (the model exported, read from `folder` when it is here) was made from, as far as its files
    say (a Mergesmith recipe, an adapter's configuration). Never raises."""
    if ref.adapter is not None:
        parts = [ref.base.hub_id, ref.adapter.hub_id]
        return MadeFrom(None, [hub_id for hub_id in parts if hub_id and "/" in hub_id])
    found = base_models(folder) if folder is not None else []
    source = ref.hub_id
    return MadeFrom(source, [model for model in found if model != source])


def write_made_from(writer: gguf.GGUFWriter, record: MadeFrom, version: str) -> None:
    """Add `record` and "Mergesmith `version`" to the metadata `writer` will write."""
    if record.source:
        writer.add_source_repo_url(_REPO_URL + record.source)
    if record.base_models:
        writer.add_base_model_count(len(record.base_models))
        for index, model in enumerate(record.base_models):
            organisation, _, name = model.rpartition("/")
            writer.add_base_model_name(index, name)
            writer.add_base_model_organization(index, organisation)
            writer.add_base_model_repo_url(index, _REPO_URL + model)
    writer.add_string(EXPORTED_WITH, f"Mergesmith {version}")


@dataclass(frozen=True)
class GgufFacts:
    """What a model card says of one GGUF file, from its metadata: None where the file does not say."""

    path: Path
    bytes: int
    name: str | None
    architecture: str | None
    type_name: str | None  # "q4_k_m", as `export-gguf --type` names it
    made_from: MadeFrom
    exported_with: str | None  # "Mergesmith 0.1.0"; None for a file another tool wrote


def read_facts(path: Path) -> GgufFacts:
    """Read the card's facts from the metadata of the GGUF file `path` (a memory map: no tensor data is read).
    Raises CheckpointError for a file that is not a GGUF file gguf-py can read."""
    try:
        fields = gguf.GGUFReader(path).fields
    except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
        raise CheckpointError(f"{path.name} could not be read as a GGUF file ({error}).",
                              why="Its header is damaged, cut short, or it was written in another format.",
                              hint="Export the model to GGUF again, or choose another file.") from None

    def text(key: str) -> str | None:
        value = fields[key].contents() if key in fields else None
        return value if isinstance(value, str) and value.strip() else None

    def number(key: str) -> int | None:
        value = fields[key].contents() if key in fields else None
        return value if isinstance(value, int) else None

    count = number(gguf.Keys.General.BASE_MODEL_COUNT) or 0
    bases = [_hub_id(text(gguf.Keys.General.BASE_MODEL_REPO_URL.format(id=index))) for index in range(count)]
    record = MadeFrom(_hub_id(text(gguf.Keys.General.SOURCE_REPO_URL)), [model for model in bases if model])
    return GgufFacts(path, path.stat().st_size, text(gguf.Keys.General.NAME), text(gguf.Keys.General.ARCHITECTURE),
                     _type_name(number(gguf.Keys.General.FILE_TYPE)), record, text(EXPORTED_WITH))


def _hub_id(url: str | None) -> str | None:
    """"org/name" from a Hub address (https://huggingface.co/org/name, or a mirror's); None for anything else."""
    if not url or "://" not in url:
        return None
    parts = url.split("://", 1)[1].rstrip("/").split("/")[1:]
    return "/".join(parts[-2:]) if len(parts) >= 2 and all(parts[-2:]) else None


def _type_name(file_type: int | None) -> str | None:
    """llama.cpp's file type number as `--type` names it: 15 → "q4_k_m", 0 → "f32"; None when unknown."""
    try:
        name = gguf.LlamaFileType(file_type).name if file_type is not None else None
    except ValueError:
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_").lower() if name else None
