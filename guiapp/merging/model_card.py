"""The files that go with a merged model: config.json, tokenizer files, a model card and the recipe."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from guiapp import __version__
from guiapp.checkpoints.quantized.notes import dequantized_from
from guiapp.facts.dtypes import dtype_name
from guiapp.merging.plan import MergePlan
from guiapp.merging.recipe import recipe_yaml
from guiapp.merging.tokenizers import (
    chat_template_text,
    write_chat_template,
    write_serialized_tokenizer,
    write_tokenizer,
)

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "vocab.json",
    "merges.txt", "vocab.txt", "added_tokens.json", "chat_template.jinja", "spiece.model",
)

def write_merge_metadata(folder: Path, plan: MergePlan, model_folders: list[Path], donor_folder: Path | None = None) -> None:
    """Write config.json, tokenizer and generation files, README.md and mergesmith_recipe.yml into `folder`.

    The tokenizer is the one `plan` built (union or trimmed vocabulary), else the tokenizer source's files
    (`donor_folder` for a model that lends only its tokenizer); the recipe's chat template is written into it.
    """
    if plan.config is not None:
        (folder / "config.json").write_text(json.dumps(plan.config, indent=2) + "\n")
    tokenizer_folder = donor_folder or model_folders[plan.tokenizer_model]
    copy_companion_files(folder, tokenizer_folder, model_folders[plan.config_model])
    if plan.tokenizer_document is not None:
        write_tokenizer(folder, plan.tokenizer_document, tokenizer_folder)
    elif (note := write_serialized_tokenizer(folder, tokenizer_folder)) is not None:
        plan.warnings.append(note)
    if plan.recipe.chat_template is not None:
        template = chat_template_text(plan.recipe.chat_template, model_folders)
        if template is None:
            plan.warnings.append("chat_template: auto found no chat template in the inputs, so none was written.")
        else:
            write_chat_template(folder, template)
    (folder / "mergesmith_recipe.yml").write_text(recipe_yaml(plan.recipe.document))
    (folder / "README.md").write_text(merge_card(plan))


def copy_companion_files(folder: Path, tokenizer_folder: Path, config_folder: Path) -> None:
    """Copy the tokenizer files of `tokenizer_folder` and the generation settings of `config_folder` into `folder`."""
    for source, names in ((tokenizer_folder, TOKENIZER_FILES), (config_folder, ("generation_config.json",))):
        for name in names:
            if (source / name).is_file():
                shutil.copyfile(source / name, folder / name)


def merge_card(plan: MergePlan) -> str:
    """A model card that needs no network: front matter for the Hub, what was merged, and the recipe."""
    hub_models = [m.ref.hub_id for m in plan.models if m.ref.hub_id]
    front = {"library_name": "transformers", "tags": ["merge", "mergesmith"]}
    if hub_models:
        front = {"base_model": hub_models, **front}
    method = plan.method
    paper = f" ([paper]({method.paper}))" if method.paper else ""
    base = plan.recipe.base_model
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False).strip(),
        "---",
        "",
        "# Merged model",
        "",
        f"This model was made with Mergesmith {__version__} using the "
        f"**{method.title}** method{paper}: {method.summary}",
        "",
        "## Models merged",
        "",
    ]
    for model in plan.models:
        role = " (base)" if base is not None and model.ref == base else ""
        lines.append(f"- {model.label}{role}{dequantized_from(model.quantization)}")
    lines += ["", "## Precision", "", _precision_line(plan)]
    lines += ["", "## Recipe", "", "```yaml", recipe_yaml(plan.recipe.document).rstrip(), "```", ""]
    return "\n".join(lines)


def _precision_line(plan: MergePlan) -> str:
    computed, stored = dtype_name(plan.compute_dtype), dtype_name(plan.out_dtype)
    if plan.compute_as_recipe and plan.method.mergekit_float32:
        return (f"Computed in {computed}, as mergekit computes {plan.method.name} whatever the recipe's dtype "
                f"(`--compute-dtype recipe`); stored as {stored}.")
    if plan.compute_as_recipe:
        return (f"Computed in the recipe's dtype ({computed}), as mergekit does (`--compute-dtype recipe`); "
                f"stored as {stored}.")
    return f"Computed in {computed} and rounded once to {stored} when stored."
