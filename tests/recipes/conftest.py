from __future__ import annotations

from pathlib import Path

import pytest
import torch

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune


@pytest.fixture(scope="session")
def llama_pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A float32 base and two fine-tunes of it, shared read-only by the recipe tests."""
    folder = tmp_path_factory.mktemp("recipes")
    base = write_llama(folder / "base", LlamaShape(layers=2), dtype=torch.float32, seed=0)
    one = write_llama_finetune(folder / "one", base, seed=1, delta_rank=None)
    two = write_llama_finetune(folder / "two", base, seed=2, delta_rank=None)
    return base, one, two
