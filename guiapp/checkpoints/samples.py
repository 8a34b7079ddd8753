"""Small generated models: the demo's sample models and the test suite's checkpoints.

They are real checkpoints (safetensors + a transformers-compatible config.json) with random weights, so
transformers can load them and every job runs on them exactly as on a downloaded model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from guiapp.errors import CheckpointError
from guiapp.facts.dtypes import dtype_name

# The key in config.json that marks the demo's sample models as untrained; models made from them keep it, since
# merges and applied adapters take their config.json from the base model.
UNTRAINED_KEY = "mergesmith_untrained_sample"


@dataclass(frozen=True)
class LlamaShape:
    hidden: int = 64
    intermediate: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 256

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def llama_config(shape: LlamaShape, dtype: torch.dtype, tie_embeddings: bool = False) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": shape.vocab,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "tie_word_embeddings": tie_embeddings,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": dtype_name(dtype),
    }


def llama_tensors(shape: LlamaShape, generator: torch.Generator, tie_embeddings: bool = False) -> dict[str, torch.Tensor]:
    """Random float32 weights with the names and shapes of a transformers LlamaForCausalLM."""

    def randn(*dims: int, scale: float = 0.02) -> torch.Tensor:
        return torch.randn(*dims, generator=generator, dtype=torch.float32) * scale

    kv = shape.kv_heads * shape.head_dim
    tensors = {"model.embed_tokens.weight": randn(shape.vocab, shape.hidden)}
    for i in range(shape.layers):
        prefix = f"model.layers.{i}."
        tensors[prefix + "self_attn.q_proj.weight"] = randn(shape.hidden, shape.hidden)
        tensors[prefix + "self_attn.k_proj.weight"] = randn(kv, shape.hidden)
        tensors[prefix + "self_attn.v_proj.weight"] = randn(kv, shape.hidden)
        tensors[prefix + "self_attn.o_proj.weight"] = randn(shape.hidden, shape.hidden)
        tensors[prefix + "mlp.gate_proj.weight"] = randn(shape.intermediate, shape.hidden)
        tensors[prefix + "mlp.up_proj.weight"] = randn(shape.intermediate, shape.hidden)
        tensors[prefix + "mlp.down_proj.weight"] = randn(shape.hidden, shape.intermediate)
        tensors[prefix + "input_layernorm.weight"] = 1 + randn(shape.hidden, scale=0.1)
        tensors[prefix + "post_attention_layernorm.weight"] = 1 + randn(shape.hidden, scale=0.1)
    tensors["model.norm.weight"] = 1 + randn(shape.hidden, scale=0.1)
    if not tie_embeddings:
        tensors["lm_head.weight"] = randn(shape.vocab, shape.hidden)
    return tensors


def write_checkpoint(
    folder: Path,
    tensors: dict[str, torch.Tensor],
    config: dict,
    dtype: torch.dtype | None = None,
    shards: int = 1,
) -> Path:
    """Write `tensors` (cast to `dtype` if given) as a model folder with `config.json`.

    `shards > 1` writes `model-0000i-of-0000N.safetensors` files and `model.safetensors.index.json`.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if dtype is not None:
        tensors = {name: t.to(dtype) if t.is_floating_point() else t for name, t in tensors.items()}
    tensors = {name: t.contiguous() for name, t in tensors.items()}
    names = list(tensors)
    if shards <= 1:
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    else:
        weight_map = {}
        per_shard = -(-len(names) // shards)
        for index in range(shards):
            chunk = names[index * per_shard : (index + 1) * per_shard]
            filename = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
            save_file({n: tensors[n] for n in chunk}, folder / filename, metadata={"format": "pt"})
            weight_map.update({n: filename for n in chunk})
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2))
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def write_llama(
    folder: Path,
    shape: LlamaShape = LlamaShape(),
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
    shards: int = 1,
    tie_embeddings: bool = False,
) -> Path:
    """A random Llama-style model folder."""
    generator = torch.Generator().manual_seed(seed)
    tensors = llama_tensors(shape, generator, tie_embeddings)
    return write_checkpoint(folder, tensors, llama_config(shape, dtype, tie_embeddings), dtype, shards)


def write_byte_tokenizer(folder: Path, vocab: int = 256) -> None:
    """A byte-level tokenizer for the sample models (tokenizer.json + tokenizer_config.json), built offline.

    Ids 0–2 are <unk>, <s> and </s> (the config's bos/eos ids); the other ids are single bytes, starting at byte 3,
    so any typed text tokenizes: the sample models can be tried, not only merged.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415 - only the demo writes one

    specials = ["<unk>", "<s>", "</s>"]
    byte_chars = _byte_level_alphabet()
    tokens = specials + [byte_chars[b] for b in range(len(specials), min(vocab, 256))]
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=[], unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(specials)
    folder = Path(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "model_max_length": 512, "clean_up_tokenization_spaces": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def _byte_level_alphabet() -> list[str]:
    """GPT-2's byte-to-character table: printable bytes stand for themselves, the others for chars above 255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return [chars[byte] for byte in range(256)]


def write_llama_finetune(
    folder: Path,
    base: Path,
    seed: int = 1,
    delta_rank: int | None = 4,
    delta_scale: float = 0.01,
    noise: float = 0.0,
    dtype: torch.dtype | None = None,
) -> Path:
    """A "fine-tune" of the model at `base`: every 2-D weight plus a random update.

    `delta_rank` makes the update of each matrix of that rank (None: full rank); `noise` adds full-rank noise
    of that standard deviation on top; norms get a small shift too, so that norm changes can be tested.
    """
    from guiapp.checkpoints.reading import open_checkpoint  # noqa: PLC0415 - samples is imported by checkpoint tests

    generator = torch.Generator().manual_seed(seed)
    config = json.loads((Path(base) / "config.json").read_text())
    source = open_checkpoint(Path(base))
    storage_dtype = dtype or next(iter(source.tensors.values())).dtype
    tensors = {}
    for name in source.tensors:
        weight = source.read(name).float()
        if weight.ndim == 2:
            rows, cols = weight.shape
            if delta_rank is None:
                update = torch.randn(rows, cols, generator=generator, dtype=torch.float32) * delta_scale
            else:
                left = torch.randn(rows, delta_rank, generator=generator, dtype=torch.float32)
                right = torch.randn(delta_rank, cols, generator=generator, dtype=torch.float32)
                update = left @ right * (delta_scale / delta_rank**0.5)
            weight = weight + update
        else:
            weight = weight + torch.randn(weight.shape, generator=generator, dtype=torch.float32) * delta_scale
        if noise:
            weight = weight + torch.randn(weight.shape, generator=generator, dtype=torch.float32) * noise
        tensors[name] = weight
    config["torch_dtype"] = dtype_name(storage_dtype)
    return write_checkpoint(folder, tensors, config, storage_dtype)


@dataclass(frozen=True)
class BertShape:
    hidden: int = 32
    intermediate: int = 64
    layers: int = 2
    heads: int = 4
    vocab: int = 128
    positions: int = 64


def bert_config(shape: BertShape, dtype: torch.dtype) -> dict:
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "vocab_size": shape.vocab,
        "max_position_embeddings": shape.positions,
        "type_vocab_size": 2,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "torch_dtype": dtype_name(dtype),
    }


def bert_tensors(shape: BertShape, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random float32 weights with the names and shapes of a transformers BertModel (encoder-only, with pooler)."""

    def randn(*dims: int, scale: float = 0.02) -> torch.Tensor:
        return torch.randn(*dims, generator=generator, dtype=torch.float32) * scale

    def linear(prefix: str, rows: int, cols: int) -> None:
        tensors[prefix + ".weight"] = randn(rows, cols)
        tensors[prefix + ".bias"] = randn(rows)

    def layer_norm(prefix: str) -> None:
        tensors[prefix + ".weight"] = 1 + randn(shape.hidden, scale=0.1)
        tensors[prefix + ".bias"] = randn(shape.hidden)

    tensors = {
        "embeddings.word_embeddings.weight": randn(shape.vocab, shape.hidden),
        "embeddings.position_embeddings.weight": randn(shape.positions, shape.hidden),
        "embeddings.token_type_embeddings.weight": randn(2, shape.hidden),
    }
    layer_norm("embeddings.LayerNorm")
    for i in range(shape.layers):
        prefix = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            linear(prefix + f"attention.self.{name}", shape.hidden, shape.hidden)
        linear(prefix + "attention.output.dense", shape.hidden, shape.hidden)
        layer_norm(prefix + "attention.output.LayerNorm")
        linear(prefix + "intermediate.dense", shape.intermediate, shape.hidden)
        linear(prefix + "output.dense", shape.hidden, shape.intermediate)
        layer_norm(prefix + "output.LayerNorm")
    linear("pooler.dense", shape.hidden, shape.hidden)
    return tensors


def write_bert(folder: Path, shape: BertShape = BertShape(), dtype: torch.dtype = torch.float32, seed: int = 0) -> Path:
    """A random BERT-style encoder model folder (a BertModel checkpoint)."""
    generator = torch.Generator().manual_seed(seed)
    return write_checkpoint(folder, bert_tensors(shape, generator), bert_config(shape, dtype), dtype)


def mark_untrained(folder: Path) -> None:
    """Mark the model in `folder` as an untrained sample model (in its config.json)."""
    from guiapp.checkpoints.reading import read_json_object  # noqa: PLC0415 - samples is imported by checkpoint tests

    path = Path(folder) / "config.json"
    config = read_json_object(path, hint="Delete the sample models' folder; the demo writes them again.")
    config[UNTRAINED_KEY] = "random weights, never trained"
    path.write_text(json.dumps(config, indent=2))


def untrained_note(folder: Path | None) -> str | None:
    """Why the model in `folder` answers in gibberish, when it is a sample model (or made from them): its weights
    are random, so its perplexity is about its vocabulary size. None for any other model, or a folder whose
    config.json cannot be read."""
    from guiapp.checkpoints.reading import read_json_object  # noqa: PLC0415 - samples is imported by checkpoint tests

    if folder is None:
        return None
    try:
        config = read_json_object(Path(folder) / "config.json", hint="")
    except CheckpointError:
        return None
    if UNTRAINED_KEY not in config:
        return None
    vocabulary = config.get("vocab_size")
    size = f" ({vocabulary})" if isinstance(vocabulary, int) else ""
    return ("an untrained sample model: its weights are random, so it writes gibberish and its perplexity is about "
            f"its vocabulary size{size}; merge or try downloaded models for real answers")
