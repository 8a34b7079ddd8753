"""Sample models for the hub tests, and the test Hub fixtures (`hub_server`, `hub_env`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - fixtures used by this folder's tests
from tests.support.hub_server import TEST_TOKEN, enable_uploads

# Big enough that a header read (the client asks for 100,000 bytes) is clearly not the whole file.
SMALL = LlamaShape(hidden=128, intermediate=256, layers=2, heads=4, kv_heads=2, vocab=512)
# A few MB, so that slow transfers, drops and cancels happen in the middle of a file.
LARGE = LlamaShape(hidden=256, intermediate=1024, layers=1, heads=4, kv_heads=2, vocab=2048)


@dataclass(frozen=True)
class SampleModels:
    base: Path
    finetune: Path
    big_vocab: Path
    wider: Path
    tied: Path
    sharded: Path
    adapter: Path
    large: Path


@pytest.fixture(scope="session")
def samples(tmp_path_factory: pytest.TempPathFactory) -> SampleModels:
    root = tmp_path_factory.mktemp("hub-samples")
    base = write_llama(root / "base", SMALL, seed=0)
    (base / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (base / "README.md").write_text("---\nlicense: apache-2.0\n---\n# base\n")
    (base / "onnx").mkdir()
    (base / "onnx" / "model.onnx").write_bytes(b"\0" * 4096)
    finetune = write_llama_finetune(root / "finetune", base, seed=1)
    big_vocab = write_llama(root / "big_vocab", replace(SMALL, vocab=520), seed=2)
    wider = write_llama(root / "wider", replace(SMALL, intermediate=384), seed=3)
    tied = write_llama(root / "tied", SMALL, seed=4, tie_embeddings=True)
    sharded = write_llama(root / "sharded", SMALL, seed=5, shards=3)
    large = write_llama(root / "large", LARGE, seed=6)
    return SampleModels(base, finetune, big_vocab, wider, tied, sharded, _write_adapter(root / "adapter"), large)


def _write_adapter(folder: Path) -> Path:
    """A PEFT LoRA adapter (rank 4 on q_proj and v_proj) for the SMALL base."""
    folder.mkdir(parents=True)
    generator = torch.Generator().manual_seed(7)
    kv = SMALL.kv_heads * SMALL.head_dim
    tensors = {}
    for layer in range(SMALL.layers):
        prefix = f"base_model.model.model.layers.{layer}.self_attn."
        for module, rows in (("q_proj", SMALL.hidden), ("v_proj", kv)):
            tensors[f"{prefix}{module}.lora_A.weight"] = torch.randn(4, SMALL.hidden, generator=generator)
            tensors[f"{prefix}{module}.lora_B.weight"] = torch.randn(rows, 4, generator=generator)
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
    config = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"],
              "base_model_name_or_path": "org/base", "task_type": "CAUSAL_LM"}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture
def uploads(hub_env, tmp_path):
    """The test Hub, accepting uploads into a store of its own (its `roles` give tokens their permissions)."""
    return enable_uploads(hub_env.server, tmp_path / "hub-store")


@pytest.fixture
def signed_in(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
