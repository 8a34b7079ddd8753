"""A tiny Llama base with a real word-level tokenizer and three "fine-tunes" of it (perturbed copies), shared
read-only by the MoE tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from guiapp.checkpoints.samples import LlamaShape, llama_config, llama_tensors, write_checkpoint, write_llama_finetune
from tests.recipes.models import SPECIALS, write_tokenizer_files

WORDS = ["add", "two", "numbers", "sum", "equation", "write", "a", "poem", "about", "the", "sea", "rhyme",
         "python", "function", "code", "bug", "story", "dragon", "prove", "theorem"]
TOKENS = SPECIALS + WORDS


def copy_tokenizer(source: Path, folder: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(source / name, folder / name)


@pytest.fixture(scope="session")
def moe_models(tmp_path_factory) -> dict[str, Path]:
    """base (float32, hidden 32, 2 layers) and fine-tunes e0, e1, e2 of it, each with the base's tokenizer."""
    root = tmp_path_factory.mktemp("moe-models")
    shape = LlamaShape(hidden=32, intermediate=64, layers=2, heads=4, kv_heads=2, vocab=len(TOKENS))
    base = write_checkpoint(root / "base", llama_tensors(shape, torch.Generator().manual_seed(0)),
                            llama_config(shape, torch.float32), torch.float32)
    write_tokenizer_files(base, TOKENS)
    models = {"base": base}
    for index in range(3):
        folder = write_llama_finetune(root / f"e{index}", base, seed=10 + index, delta_rank=None, delta_scale=0.05)
        copy_tokenizer(base, folder)
        models[f"e{index}"] = folder
    return models


@pytest.fixture
def stored_probe(probed):
    """This machine's real probe (the process's one), stored where the hidden gates' `probe()` finds it."""
    from guiapp.system.probe import cache_file, machine_fingerprint, store

    store(probed, cache_file(machine_fingerprint()))
    return probed
