"""The model card a published model carries, and the licence it is offered under.

The card starts from the README.md a Mergesmith job wrote (a merge's card has the method, the inputs and the
recipe; an adapter's folder has its extraction report) and gains the Hub metadata: `license`, `base_model`
listing the inputs, the tags `merge`, `mergekit`, `mergesmith`, and a usage snippet. The licence is preset from
the inputs' licences; an input that is gated or whose licence forbids derivatives comes with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from guiapp.errors import MergesmithError
from guiapp.hub.local_folders import adapter_base
from guiapp.system.bounded import (
    JSON_BYTES,
    RECIPE_BYTES,
    load_json_limited,
    load_yaml_limited,
    parse_yaml_bounded,
    read_text_limited,
)

LICENCES = ("apache-2.0", "mit", "llama3.1", "llama3.2", "llama3.3", "gemma", "cc-by-4.0", "cc-by-sa-4.0",
            "cc-by-nc-4.0", "openrail", "other")
# Licences under which a derived model may not be shared at all.
NO_DERIVATIVES = frozenset({"cc-by-nd-4.0", "cc-by-nc-nd-4.0", "cc-by-nd-3.0", "cc-by-nc-nd-3.0"})
TAGS = ("merge", "mergekit", "mergesmith")
RECIPE_FILE = "mergesmith_recipe.yml"
EXTRACTION_REPORT = "extraction_report.json"
CARD_BYTES = 4_000_000  # a README longer than this is not a model card a merge wrote
# A path on this computer, as a merge's card names local input folders: /tmp/a/model, ~/models/model,
# C:\Users\me\model. Never part of a URL (preceded by ':' or '/') or of a word ("and/or", "1/2").
_SEGMENT = r"[^\s/\\`'\"()\[\]<>|:]+"
_LOCAL_PATH = re.compile(rf"(?<![\w.:/~-])(?:~?/(?:{_SEGMENT}/)+|[A-Za-z]:[\\/](?:{_SEGMENT}[\\/])*)({_SEGMENT})")


@dataclass(frozen=True)
class InputLicence:
    """An input model's licence as its Hub page states it (None: not stated), and whether it is gated."""

    model: str
    licence: str | None
    gated: bool


def licence_warnings(inputs: list[InputLicence]) -> list[str]:
    """Plain-language warnings about publishing a model made from `inputs` (empty when nothing stands out)."""
    warnings = []
    for entry in inputs:
        if entry.licence in NO_DERIVATIVES:
            warnings.append(f"{entry.model} is under {entry.licence}, which forbids sharing models derived from it: "
                            "publishing this one would break its licence.")
        elif entry.gated:
            warnings.append(f"{entry.model} is gated: its authors require people to accept its terms first. Check "
                            "that they allow sharing derived models, and consider keeping this one gated or private.")
        elif entry.licence in (None, "other"):
            warnings.append(f"{entry.model} states {'no licence' if entry.licence is None else 'its own licence'}: "
                            "read it on its page before sharing a model made from it.")
    return warnings


def preset_licence(inputs: list[InputLicence]) -> str:
    """The licence the inputs share, else "other" (the user then names it in the card)."""
    stated = {entry.licence for entry in inputs if entry.licence}
    return stated.pop() if len(stated) == 1 else "other"


def base_models(folder: Path) -> list[str]:
    """The Hub ids of the models `folder` was made from: the recipe's models, or an adapter's base model."""
    from guiapp.hub.references import ModelRef

    names: list[str | None] = []
    try:
        document = load_yaml_limited(folder / RECIPE_FILE, RECIPE_BYTES, MergesmithError, what="recipe") or {}
        sources = [*(document.get("models") or []),
                   *(s for piece in document.get("slices") or [] for s in piece.get("sources") or [])]
        names = [entry.get("model") if isinstance(entry, dict) else entry for entry in sources]
        names.append(document.get("base_model"))
    except (MergesmithError, AttributeError, TypeError):  # no recipe, or not one Mergesmith wrote: no inputs from it
        names = []
    names.append(adapter_base(folder))
    models = []
    for name in names:
        hub_id = ModelRef.parse(name).hub_id if isinstance(name, str) and name.strip() else None
        if hub_id and "/" in hub_id:
            models.append(hub_id)
    return list(dict.fromkeys(models))


def input_licences(models: list[str]) -> list[InputLicence]:
    """Each model's licence and gating from its Hub page (licence None for a model the Hub does not show).
    Raises the other HubErrors of `model_details` (offline, connection lost)."""
    from guiapp.errors import ModelNotFoundError
    from guiapp.hub.details import model_details

    entries = []
    for model in models:
        try:
            details = model_details(model, None)
        except ModelNotFoundError:  # gone or private: its licence cannot be read, which the warning says
            entries.append(InputLicence(model, None, False))
            continue
        entries.append(InputLicence(model, details.licence, bool(details.gated)))
    return entries


def publish_card(folder: Path, repo_id: str, licence: str) -> str:
    """The README.md to publish with `folder` as `repo_id`, for the user to review and edit.

    Keeps the folder's own card (its text and front matter) and sets `license`, `base_model` and the tags; adds
    the extraction report's summary for an adapter and a usage snippet; local paths become folder names. Never
    raises for a missing card.
    """
    front, body = _split_card(folder / "README.md")
    front["license"] = licence
    bases = base_models(folder)
    if bases:
        front["base_model"] = bases
    front["tags"] = list(dict.fromkeys([*(front.get("tags") or []), *TAGS]))
    is_adapter = (folder / "adapter_config.json").is_file()
    if is_adapter:
        front.setdefault("library_name", "peft")
    if not body.strip():
        body = f"# {repo_id.split('/')[-1]}\n\nMade with Mergesmith.\n"
    sections = [body.rstrip()]
    report = folder / EXTRACTION_REPORT
    if is_adapter and report.is_file() and "## Extraction report" not in body:
        sections.append(_report_section(report))
    if "## Usage" not in body:
        sections.append(_usage_section(repo_id, bases[0] if is_adapter and bases else None))
    header = yaml.safe_dump(front, sort_keys=False, allow_unicode=True).strip()
    return without_local_paths(f"---\n{header}\n---\n\n" + "\n\n".join(sections) + "\n")


def without_local_paths(text: str) -> str:
    """`text` with every path on this computer replaced by its last part (a model folder's name): a published
    card names models by Hub id or folder name, never by where they lie here (a user name, a home folder)."""
    return _LOCAL_PATH.sub(lambda match: match.group(1), text)


def with_licence(card: str, licence: str) -> str:
    """`card` (README.md text, maybe edited by the user) with its front matter's `license` set to `licence` and
    nothing else changed: the line is replaced in place, added at the top of the front matter when missing, and a
    card without front matter gains one holding only the licence. Never raises."""
    line = yaml.safe_dump({"license": " ".join(licence.split())}, allow_unicode=True, width=10_000).strip()
    if card.startswith("---\n"):
        front, separator, rest = card[4:].partition("\n---")
        if separator:
            lines = front.split("\n")
            for index, text in enumerate(lines):
                if text.startswith("license:"):
                    lines[index] = line
                    break
            else:
                lines.insert(0, line)
            return "---\n" + "\n".join(lines) + separator + rest
    return f"---\n{line}\n---\n\n" + card


def _split_card(path: Path) -> tuple[dict, str]:
    try:
        text = read_text_limited(path, CARD_BYTES, MergesmithError, what="model card")
    except MergesmithError:  # no card (or not a text file): the card is written from scratch
        text = ""
    if text.startswith("---\n"):
        front_text, separator, body = text[4:].partition("\n---")
        if separator:
            try:
                front = parse_yaml_bounded(front_text, str(path), MergesmithError) or {}
            except MergesmithError:
                front = {}
            return (front if isinstance(front, dict) else {}), body.lstrip("-\n")
    return {}, text


def _report_section(report: Path) -> str:
    try:
        data = load_json_limited(report, JSON_BYTES, MergesmithError, what="extraction report")
    except MergesmithError:
        data = None
    if not isinstance(data, dict):
        return "## Extraction report\n\nThe extraction report (extraction_report.json) is in the files."
    lines = ["## Extraction report", ""]
    for key in ("lora_modules", "saved_modules", "mean_retained_energy"):
        if key in data:
            lines.append(f"- {key.replace('_', ' ')}: {data[key]}")
    lines.append("\nPer-module ranks and errors are in extraction_report.json.")
    return "\n".join(lines)


def _usage_section(repo_id: str, adapter_base: str | None) -> str:
    if adapter_base:
        code = (f'from peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n'
                f'base = AutoModelForCausalLM.from_pretrained("{adapter_base}")\n'
                f'model = PeftModel.from_pretrained(base, "{repo_id}")\n'
                f'tokenizer = AutoTokenizer.from_pretrained("{adapter_base}")')
    else:
        code = (f'from transformers import AutoModelForCausalLM, AutoTokenizer\n\n'
                f'model = AutoModelForCausalLM.from_pretrained("{repo_id}")\n'
                f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")')
    return f"## Usage\n\n```python\n{code}\n```"
