from __future__ import annotations

from pathlib import Path

import pytest
import torch

from guiapp.checkpoints.samples import write_bert, write_llama
from tests.lora.helpers import finetune


@pytest.fixture(scope="session")
def llama_base(tmp_path_factory) -> Path:
    """A small float32 Llama-style base model, shared read-only."""
    return write_llama(tmp_path_factory.mktemp("llama") / "base", dtype=torch.float32)


@pytest.fixture(scope="session")
def llama_planted(llama_base: Path) -> Path:
    """A fine-tune of `llama_base` whose every matrix changed by rank 4 and every norm by a shift."""
    return finetune(llama_base, llama_base.parent / "planted")


@pytest.fixture(scope="session")
def bert_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A BERT-style encoder and a fine-tune of it (rank-4 matrices, shifted biases and LayerNorms)."""
    folder = tmp_path_factory.mktemp("bert")
    base = write_bert(folder / "base")
    return base, finetune(base, folder / "tuned")
