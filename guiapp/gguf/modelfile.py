"""The Ollama Modelfile written beside an exported GGUF file, so `ollama create` can import it."""

from __future__ import annotations

from pathlib import Path


def modelfile_path(gguf_path: Path) -> Path:
    return gguf_path.with_name(f"{gguf_path.stem}.Modelfile")


def write_modelfile(gguf_path: Path) -> Path | None:
    """Write `<name>.Modelfile` beside `gguf_path` (Ollama reads the chat template from the GGUF file itself).
    Returns its path, or None when a file of that name is there already (it is left as it is). Raises OSError
    when the folder cannot be written."""
    path = modelfile_path(gguf_path)
    text = (f"# Import into Ollama with:  ollama create {gguf_path.stem.lower()} -f \"{path.name}\"\n"
            f"# (run it in this folder), then:  ollama run {gguf_path.stem.lower()}\n"
            f"FROM ./{gguf_path.name}\n")
    try:
        with path.open("x", encoding="utf-8") as stream:
            stream.write(text)
    except FileExistsError:
        return None
    return path
