"""The sample job: two small fine-tunes of one small base model (with a byte-level tokenizer, so they can be tried
too), generated locally, and a recipe merging them.

It lets a new user see a whole job work in seconds without downloading anything (the CLI's `demo`, the
window's "Try it with sample models", and `--self-test`).
"""

from __future__ import annotations

from pathlib import Path

from guiapp.errors import OutputError
from guiapp.facts.wording import say
from guiapp.merging.recipe import Recipe, recipe_from_dict
from guiapp.system.paths import home_dir


def default_demo_folder() -> Path:
    return home_dir() / "Mergesmith" / "sample-models"


def prepare_demo(folder: Path) -> Recipe:
    """Write the sample models into `folder` (reusing them when already there) and return the demo recipe.

    Raises OutputError when one of the sample models' folders exists holding something else.
    """
    import torch  # only this job needs it at this point

    from guiapp.checkpoints.samples import (
        mark_untrained,
        untrained_note,
        write_byte_tokenizer,
        write_llama,
        write_llama_finetune,
    )

    folder = Path(folder)
    base, math_tune, chat_tune = folder / "tiny-base", folder / "tiny-math", folder / "tiny-chat"
    for model in (base, math_tune, chat_tune):
        if not (model / "config.json").is_file() and (model.is_file() or model.is_dir() and any(model.iterdir())):
            raise OutputError(
                f"{model} already exists and is not a sample model, so the demo does not write there.",
                hint=say("Choose another folder for the demo{aside:{output}}, or move that folder away."),
            )
    if not (base / "config.json").is_file():
        write_llama(base, dtype=torch.bfloat16, seed=0)
    for model, seed in ((math_tune, 1), (chat_tune, 2)):
        if not (model / "config.json").is_file():
            write_llama_finetune(model, base, seed=seed, delta_rank=None, delta_scale=0.005)
    for model in (base, math_tune, chat_tune):
        if not (model / "tokenizer.json").is_file():  # sample folders written before the samples had one
            write_byte_tokenizer(model)
        if untrained_note(model) is None:  # also those written before the samples carried the mark
            mark_untrained(model)
    return recipe_from_dict(
        {
            "merge_method": "ties",
            "base_model": str(base),
            "models": [
                {"model": str(math_tune), "parameters": {"weight": 0.6, "density": 0.5}},
                {"model": str(chat_tune), "parameters": {"weight": 0.4, "density": 0.5}},
            ],
            "dtype": "bfloat16",
        }
    )
