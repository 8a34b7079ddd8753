"""The model card published with GGUF files: the model they hold, how they were made, and how to run them.

Everything comes from the files' own metadata (see guiapp.gguf.provenance): the model's name and architecture,
the type in plain words, the Hub model it was exported from or the ones that model was made from, and whether
Mergesmith wrote it. The card says how to run the file in LM Studio, Ollama and llama.cpp.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from guiapp.facts.gguf_types import KIND_WORDS
from guiapp.gguf.provenance import GgufFacts, read_facts
from guiapp.hub.publish_card import without_local_paths
from guiapp.system.units import three_digits

SUFFIX = ".gguf"


def gguf_files(path: Path) -> list[Path]:
    """The GGUF files publishing `path` uploads: `path` itself when it is a .gguf file, else a folder's own .gguf
    files unless the folder is a Transformers model or an adapter (its card is then the folder's). Never raises."""
    path = Path(path)
    if path.is_file():
        return [path] if path.suffix.lower() == SUFFIX else []
    if not path.is_dir() or (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
        return []
    return sorted(file for file in path.glob(f"*{SUFFIX}") if file.is_file() and not file.is_symlink())


def gguf_base_models(files: list[Path]) -> list[str]:
    """The Hub models the card names as `base_model`: the model each file was exported from, else the models
    that one was made from. Raises CheckpointError for a file that is not GGUF."""
    models: list[str] = []
    for facts in map(read_facts, files):
        record = facts.made_from
        models += [record.source] if record.source else record.base_models
    return list(dict.fromkeys(models))


def gguf_card(files: list[Path], repo_id: str, licence: str) -> str:
    """The README.md to publish with the GGUF `files` as `repo_id` under `licence`, for the user to review.
    Raises CheckpointError for a file that is not GGUF."""
    facts = [read_facts(Path(file)) for file in files]
    front: dict = {"license": licence}
    bases = gguf_base_models([fact.path for fact in facts])
    if bases:
        front["base_model"] = bases
    front["library_name"] = "gguf"
    front["tags"] = ["gguf", *(["mergesmith"] if any(fact.exported_with for fact in facts) else [])]
    title = repo_id.split("/")[-1]
    sections = [f"# {title}",
                f"{_model_words(facts[0])} as GGUF, the format LM Studio, Ollama and llama.cpp load.",
                _made_section(facts), _files_section(facts), _run_section(repo_id, facts)]
    header = yaml.safe_dump(front, sort_keys=False, allow_unicode=True).strip()
    return without_local_paths(f"---\n{header}\n---\n\n" + "\n\n".join(sections) + "\n")


def _model_words(facts: GgufFacts) -> str:
    return f"**{facts.name or facts.path.stem}**" + (f" ({facts.architecture})" if facts.architecture else "")


def _made_section(facts: list[GgufFacts]) -> str:
    lines = ["## How it was made", ""]
    for fact in facts:
        what = f"`{fact.path.name}`: " if len(facts) > 1 else ""
        record = fact.made_from
        source = (f"the Hub model [{record.source}](https://huggingface.co/{record.source})" if record.source
                  else f"the model {_model_words(fact)}")
        lines.append(f"- {what}Source model: {source}" + (f", architecture {fact.architecture}"
                                                          if record.source and fact.architecture else ""))
        if record.base_models:
            lines.append(f"- {what}Made from: " + ", ".join(record.base_models))
        if fact.type_name:
            lines.append(f"- {what}Type: {fact.type_name.upper()}" + (f" — {KIND_WORDS[fact.type_name]}"
                                                                      if fact.type_name in KIND_WORDS else ""))
        lines.append(f"- {what}Exported with {fact.exported_with}" if fact.exported_with
                     else f"- {what}The file does not say which tool wrote it; published with Mergesmith")
    return "\n".join(lines)


def _files_section(facts: list[GgufFacts]) -> str:
    rows = [f"| {fact.path.name} | {(fact.type_name or 'unknown').upper()} | {three_digits(fact.bytes)} | "
            f"{KIND_WORDS.get(fact.type_name or '', '')} |" for fact in facts]
    return "## Files\n\n| File | Type | Size | What it means |\n|---|---|---|---|\n" + "\n".join(rows)


def _run_section(repo_id: str, facts: list[GgufFacts]) -> str:
    fact = facts[0]
    tag = f":{fact.type_name.upper()}" if fact.type_name else ""
    file = fact.path.name
    return "\n".join([
        "## How to run it", "",
        "**LM Studio**: in Discover, search for "
        f"`{repo_id}` and download `{file}`; or download the file and run `lms import {file}`.", "",
        f"**Ollama**: `ollama run hf.co/{repo_id}{tag}` (for a private repo, add your Ollama key, "
        "~/.ollama/id_ed25519.pub, to your Hub account's SSH keys first); or download the file, write a file named Modelfile "
        f"holding `FROM ./{file}`, then run `ollama create {Path(file).stem.lower()} -f Modelfile`.", "",
        f"**llama.cpp**: `llama-cli -hf {repo_id}{tag}` (or `llama-server -hf {repo_id}{tag}`); with the file "
        f"downloaded: `llama-cli -m {file}`."])
