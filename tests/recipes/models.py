"""Small models with real tokenizers (tokenizer.json built with the `tokenizers` library) for the vocabulary tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from guiapp.engine.samples import LlamaShape, llama_config, llama_tensors, write_checkpoint

SPECIALS = ["<unk>", "<s>", "</s>"]


def write_tokenizer_files(folder: Path, tokens: list[str], chat_template: str | None = None) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(SPECIALS)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>",
              "eos_token": "</s>"}
    if chat_template is not None:
        config["chat_template"] = chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def write_model(folder: Path, tokens: list[str], seed: int, rows: int | None = None, biases: bool = False,
                model_type: str = "llama", chat_template: str | None = None) -> Path:
    """A 2-layer model whose embedding and lm_head have `rows` rows (default: one per token)."""
    shape = LlamaShape(layers=2, vocab=rows or len(tokens))
    tensors = llama_tensors(shape, torch.Generator().manual_seed(seed))
    if biases:  # Qwen2 has q/k/v biases
        generator = torch.Generator().manual_seed(seed + 100)
        for i in range(shape.layers):
            for name, size in (("q", shape.hidden), ("k", shape.kv_heads * shape.head_dim), ("v", shape.kv_heads * shape.head_dim)):
                tensors[f"model.layers.{i}.self_attn.{name}_proj.bias"] = torch.randn(size, generator=generator)
    config = llama_config(shape, torch.float32)
    config["model_type"] = model_type
    write_checkpoint(folder, tensors, config, torch.float32)
    return write_tokenizer_files(folder, tokens, chat_template)


def rows_of(folder: Path, name: str = "model.embed_tokens.weight") -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(Path(folder) / "model.safetensors")[name]
