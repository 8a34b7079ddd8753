"""Small models of several architectures, with real tokenizers (tokenizer.json built with the `tokenizers` library),
for the recipe tests and benchmarks/recipe_parity.py."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from guiapp.checkpoints.samples import LlamaShape, llama_config, llama_tensors, write_checkpoint

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


def write_gpt2_style_tokenizer(folder: Path, text: str) -> Path:
    """GPT-2's tokenizer layout: a byte-level BPE (trained on `text`) as vocab.json + merges.txt and a
    tokenizer_config.json naming GPT2Tokenizer, with no tokenizer.json (as the original gpt2 repos and their
    fine-tunes have it)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([text] * 10, trainer)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink(missing_ok=True)
    tokenizer.model.save(str(folder))
    special = "<|endoftext|>"
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GPT2Tokenizer", "bos_token": special, "eos_token": special, "unk_token": special,
         "model_max_length": 1024}))
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
    config["architectures"] = [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[model_type]]
    write_checkpoint(folder, tensors, config, torch.float32)
    return write_tokenizer_files(folder, tokens, chat_template)


def rows_of(folder: Path, name: str = "model.embed_tokens.weight") -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(Path(folder) / "model.safetensors")[name]


HIDDEN = 16


def _randn(generator, *shape):
    return torch.randn(*shape, generator=generator) * 0.02


def write_gemma2(folder, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    tensors = {"model.embed_tokens.weight": _randn(g, len(tokens), HIDDEN), "model.norm.weight": _randn(g, HIDDEN)}
    for i in range(2):
        for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            tensors[f"model.layers.{i}.{name}.weight"] = _randn(g, HIDDEN)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"model.layers.{i}.self_attn.{name}.weight"] = _randn(g, HIDDEN, HIDDEN)
        for name, shape in (("gate_proj", (32, HIDDEN)), ("up_proj", (32, HIDDEN)), ("down_proj", (HIDDEN, 32))):
            tensors[f"model.layers.{i}.mlp.{name}.weight"] = _randn(g, *shape)
    config = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "num_hidden_layers": 2,
              "vocab_size": len(tokens), "tie_word_embeddings": True, "torch_dtype": "float32"}
    write_checkpoint(folder, tensors, config, torch.float32)
    return write_tokenizer_files(folder, tokens)


def write_phi3(folder, tokens, seed, rows):
    g = torch.Generator().manual_seed(seed)
    tensors = {"model.embed_tokens.weight": _randn(g, rows, HIDDEN), "lm_head.weight": _randn(g, rows, HIDDEN),
               "model.norm.weight": _randn(g, HIDDEN)}
    for i in range(2):
        tensors[f"model.layers.{i}.self_attn.qkv_proj.weight"] = _randn(g, 3 * HIDDEN, HIDDEN)
        tensors[f"model.layers.{i}.self_attn.o_proj.weight"] = _randn(g, HIDDEN, HIDDEN)
        tensors[f"model.layers.{i}.mlp.gate_up_proj.weight"] = _randn(g, 64, HIDDEN)
        tensors[f"model.layers.{i}.mlp.down_proj.weight"] = _randn(g, HIDDEN, 32)
        for name in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{i}.{name}.weight"] = _randn(g, HIDDEN)
    config = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "num_hidden_layers": 2,
              "vocab_size": rows, "torch_dtype": "float32"}
    write_checkpoint(folder, tensors, config, torch.float32)
    return write_tokenizer_files(folder, tokens)


def write_gpt2(folder, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    tensors = {"transformer.wte.weight": _randn(g, len(tokens), HIDDEN), "transformer.wpe.weight": _randn(g, 8, HIDDEN),
               "transformer.ln_f.weight": _randn(g, HIDDEN), "transformer.ln_f.bias": _randn(g, HIDDEN)}
    for i in range(2):
        for name, rows, cols in (("attn.c_attn", HIDDEN, 3 * HIDDEN), ("attn.c_proj", HIDDEN, HIDDEN),
                                 ("mlp.c_fc", HIDDEN, 64), ("mlp.c_proj", 64, HIDDEN)):
            tensors[f"transformer.h.{i}.{name}.weight"] = _randn(g, rows, cols)
            tensors[f"transformer.h.{i}.{name}.bias"] = _randn(g, cols)
        for name in ("ln_1", "ln_2"):
            tensors[f"transformer.h.{i}.{name}.weight"] = _randn(g, HIDDEN)
            tensors[f"transformer.h.{i}.{name}.bias"] = _randn(g, HIDDEN)
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "vocab_size": len(tokens),
              "torch_dtype": "float32"}
    write_checkpoint(folder, tensors, config, torch.float32)
    return write_tokenizer_files(folder, tokens)


def write_mistral(folder: Path, seed: int) -> Path:
    config = {**llama_config(LlamaShape(layers=2), torch.float32), "model_type": "mistral",
              "architectures": ["MistralForCausalLM"], "sliding_window": 4096}
    return write_checkpoint(folder, llama_tensors(LlamaShape(layers=2), torch.Generator().manual_seed(seed)),
                            config, torch.float32)


def write_llava(folder: Path, seed: int) -> Path:
    """LLaVA-style: `language_model.` (a 4-layer Llama), `vision_tower.vision_model.` (2 layers), a projector."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {f"language_model.{k}": v for k, v in llama_tensors(LlamaShape(layers=4), generator).items()}
    for i in range(2):
        for name, shape in (("mlp.fc1.weight", (64, 32)), ("mlp.fc2.weight", (32, 64)), ("layer_norm1.weight", (32,))):
            tensors[f"vision_tower.vision_model.encoder.layers.{i}.{name}"] = torch.randn(shape, generator=generator)
    tensors["vision_tower.vision_model.embeddings.patch_embedding.weight"] = torch.randn(32, 3, 4, 4, generator=generator)
    tensors["vision_tower.vision_model.post_layernorm.weight"] = torch.randn(32, generator=generator)
    tensors["multi_modal_projector.linear_1.weight"] = torch.randn(64, 32, generator=generator)
    config = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "torch_dtype": "float32",
              "text_config": {"model_type": "llama", "num_hidden_layers": 4, "vocab_size": 256},
              "vision_config": {"model_type": "clip_vision_model", "num_hidden_layers": 2}}
    return write_checkpoint(folder, tensors, config, torch.float32)
