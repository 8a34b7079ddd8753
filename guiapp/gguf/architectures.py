"""Which Hugging Face architectures become which GGUF architecture: tensor names, the changes llama.cpp expects
of some tensors, and the metadata llama.cpp requires, following llama.cpp's own converter (convert_hf_to_gguf.py).

- Llama and Mistral: q/k rows are permuted from Hugging Face's rotary layout (first half, second half of each
  head) to llama.cpp's (interleaved pairs); Llama-3 rope scaling becomes a `rope_freqs` tensor.
- Qwen2 and Qwen3: names only (Qwen3's q/k norms included).
- Gemma 2 and 3: their RMSNorm multiplies by (1 + weight), llama.cpp's by the weight: 1 is added to every norm;
  the output layer is the token embedding (no lm_head is written).
- Phi-3: fused qkv and gate/up tensors keep their layout; long-context rope factors become two tensors.

Everything is decided from config.json and the tensor headers, so a model that cannot be exported is refused
before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gguf
import torch

from guiapp.errors import UnsupportedModelError
from guiapp.gguf.config_defaults import with_defaults


@dataclass(frozen=True)
class Family:
    """How one Hugging Face architecture maps onto a GGUF architecture."""

    arch: gguf.MODEL_ARCH
    permute_qk: bool = False  # Llama family: rotary pairs interleaved, as llama.cpp's rope expects
    norm_shift: float = 0.0  # Gemma: RMSNorm scales by (1 + weight)
    tied_output: bool = False  # Gemma: the output layer is always the token embedding


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family(gguf.MODEL_ARCH.LLAMA, permute_qk=True),
    "MistralForCausalLM": Family(gguf.MODEL_ARCH.LLAMA, permute_qk=True),
    "Qwen2ForCausalLM": Family(gguf.MODEL_ARCH.QWEN2),
    "Qwen3ForCausalLM": Family(gguf.MODEL_ARCH.QWEN3),
    "Gemma2ForCausalLM": Family(gguf.MODEL_ARCH.GEMMA2, norm_shift=1.0, tied_output=True),
    "Gemma3ForCausalLM": Family(gguf.MODEL_ARCH.GEMMA3, norm_shift=1.0, tied_output=True),
    "Phi3ForCausalLM": Family(gguf.MODEL_ARCH.PHI3),
}

# Tensors a checkpoint may hold that llama.cpp computes itself.
_SKIPPED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclass(frozen=True)
class Source:
    """One architecture's settings: the config with transformers' defaults filled in, and its family."""

    architecture: str
    family: Family
    config: dict[str, Any]

    @property
    def arch_name(self) -> str:
        return gguf.MODEL_ARCH_NAMES[self.family.arch]

    @property
    def layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def heads(self) -> int:
        return int(self.config["num_attention_heads"])

    @property
    def kv_heads(self) -> int:
        return int(self.config.get("num_key_value_heads") or self.heads)

    @property
    def head_dim(self) -> int:
        return int(self.config.get("head_dim") or self.config["hidden_size"] // self.heads)

    def rope(self) -> dict[str, Any]:
        """The rope settings of the full-attention layers (transformers 5 keeps them under `rope_parameters`,
        per layer type for Gemma 3; older configs at the top level and under `rope_scaling`)."""
        found = dict(self.config.get("rope_scaling") or {})
        if "type" in found and "rope_type" not in found:
            found["rope_type"] = found.pop("type")
        if self.config.get("rope_theta") is not None:
            found["rope_theta"] = self.config["rope_theta"]
        parameters = self.config.get("rope_parameters") or {}
        found.update(parameters.get("full_attention", parameters))
        return found


@dataclass(frozen=True)
class PlannedTensor:
    """One tensor of the GGUF file: its name, its shape in Hugging Face's (rows, columns) order, where its values
    come from (`source`, a checkpoint tensor, or `values`, computed from the config) and how they change."""

    name: str
    shape: tuple[int, ...]
    source: str | None = None
    values: torch.Tensor | None = None
    # (rows, first row) -> rows: rows in float32, or bfloat16 for a type whose kernel reads it, so a transform that
    # computes widens them first (Gemma's norm shift); moving rows (the q/k permutation) is exact in either
    transform: Callable[[torch.Tensor, int], torch.Tensor] | None = None
    row_multiple: int = 1  # blocks of rows handed to `transform` are multiples of this


def source_of(config: dict[str, Any] | None, label: str) -> Source:
    """The architecture of a model from its config.json (transformers' defaults filled in).

    Raises UnsupportedModelError, naming the architecture, for one this exporter cannot map.
    """
    architectures = (config or {}).get("architectures") or []
    known = [name for name in architectures if name in FAMILIES]
    if not known:
        named = ", ".join(architectures) or "an unnamed architecture (config.json has no \"architectures\")"
        raise UnsupportedModelError(
            f"{label} is {named}, which Mergesmith cannot export to GGUF yet.",
            why="Each architecture needs its own tensor names and settings for llama.cpp to load it.",
            hint="GGUF export supports Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3 and Phi-3 models.",
        )
    return Source(known[0], FAMILIES[known[0]], with_defaults(config or {}))


def plan_tensors(source: Source, tensors: dict[str, tuple[int, ...]], label: str) -> list[PlannedTensor]:
    """The tensors of the GGUF file, in checkpoint order, then the computed ones.

    `tensors` maps checkpoint names to shapes. Raises UnsupportedModelError naming a tensor the architecture
    has no place for (a vision tower, a value head...).
    """
    names = gguf.get_tensor_name_map(source.family.arch, source.layers)
    tied = source.family.tied_output or bool(source.config.get("tie_word_embeddings"))
    planned: list[PlannedTensor] = []
    for name, shape in tensors.items():
        if name.endswith(_SKIPPED_SUFFIXES) or (tied and name == "lm_head.weight"):
            continue
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise UnsupportedModelError(
                f"{label} holds the tensor {name}, which has no place in a GGUF {source.arch_name} model.",
                why="llama.cpp would not know what to do with it, so the exported model would be incomplete.",
                hint="Export the language model alone (without vision or other extra parts).",
            )
        planned.append(PlannedTensor(target, tuple(shape), source=name, **_change(source, name, target)))
    planned += _computed_tensors(source)
    return planned


def _change(source: Source, name: str, target: str) -> dict[str, Any]:
    """How tensor `name` changes on its way into the file (PlannedTensor's transform and row_multiple)."""
    family = source.family
    if family.norm_shift and name.endswith("norm.weight"):
        shift = family.norm_shift
        return {"transform": lambda rows, _first: rows.float() + shift}
    if family.permute_qk and target.endswith(("attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias")):
        head_rows = source.head_dim
        return {"transform": lambda rows, _first: permute_rows(rows, head_rows), "row_multiple": head_rows}
    return {}


def permute_rows(rows: torch.Tensor, head_rows: int) -> torch.Tensor:
    """Hugging Face's rotary layout (each head's first half, then its second half) to llama.cpp's (pairs
    interleaved), for whole heads of `head_rows` rows (as many as `rows` holds), as llama.cpp's converter does."""
    count = rows.shape[0] // head_rows
    rest = rows.shape[1:]
    return rows.reshape(count, 2, head_rows // 2, *rest).swapaxes(1, 2).reshape(rows.shape)


def unpermute_rows(rows: torch.Tensor, head_rows: int) -> torch.Tensor:
    """The inverse of `permute_rows`: llama.cpp's q/k layout back to Hugging Face's."""
    count = rows.shape[0] // head_rows
    rest = rows.shape[1:]
    return rows.reshape(count, head_rows // 2, 2, *rest).swapaxes(1, 2).reshape(rows.shape)


def _computed_tensors(source: Source) -> list[PlannedTensor]:
    """Tensors llama.cpp needs that the checkpoint does not hold: Llama-3's rope frequency factors and
    Phi-3's long-context factors."""
    rope = source.rope()
    kind = str(rope.get("rope_type", "")).lower()
    if source.family.arch == gguf.MODEL_ARCH.LLAMA and kind == "llama3":
        factors = _llama3_rope_factors(rope, source.head_dim)
        return [PlannedTensor(_tensor_name(gguf.MODEL_TENSOR.ROPE_FREQS), tuple(factors.shape), values=factors)]
    if source.family.arch == gguf.MODEL_ARCH.PHI3 and rope.get("long_factor"):
        long = torch.tensor(rope["long_factor"], dtype=torch.float32)
        short = torch.tensor(rope["short_factor"], dtype=torch.float32)
        return [PlannedTensor(_tensor_name(gguf.MODEL_TENSOR.ROPE_FACTORS_LONG), tuple(long.shape), values=long),
                PlannedTensor(_tensor_name(gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT), tuple(short.shape), values=short)]
    return []


def _tensor_name(tensor: gguf.MODEL_TENSOR) -> str:
    return gguf.TENSOR_NAMES[tensor] + ".weight"


def _llama3_rope_factors(rope: dict[str, Any], head_dim: int) -> torch.Tensor:
    """Llama 3.1's frequency-dependent rope scaling, as the factors llama.cpp divides each frequency by."""
    base = float(rope.get("rope_theta", 10000.0))
    factor = float(rope.get("factor", 8.0))
    low, high = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    old_context = float(rope.get("original_max_position_embeddings", 8192))
    frequencies = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    factors = []
    for frequency in frequencies.tolist():
        wavelength = 2 * math.pi / frequency
        if wavelength < old_context / high:
            factors.append(1.0)
        elif wavelength > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(factors, dtype=torch.float32)


def write_metadata(writer: gguf.GGUFWriter, source: Source, name: str) -> None:
    """The model settings llama.cpp reads for `source`'s architecture (the tokenizer's are written apart)."""
    config = source.config
    rope = source.rope()
    writer.add_name(name)
    writer.add_block_count(source.layers)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(source.heads)
    writer.add_head_count_kv(source.kv_heads)
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    if rope.get("rope_theta") is not None:
        writer.add_rope_freq_base(float(rope["rope_theta"]))
    local = (config.get("rope_parameters") or {}).get("sliding_attention", {}).get("rope_theta") \
        or config.get("rope_local_base_freq")
    if local is not None and source.family.arch == gguf.MODEL_ARCH.GEMMA3:
        writer.add_rope_freq_base_swa(float(local))
    _write_rope_scaling(writer, source, rope)
    if config.get("head_dim") is not None or source.family.arch in (gguf.MODEL_ARCH.GEMMA2, gguf.MODEL_ARCH.GEMMA3):
        writer.add_key_length(source.head_dim)
        writer.add_value_length(source.head_dim)
    arch = source.family.arch
    if arch == gguf.MODEL_ARCH.LLAMA:
        writer.add_vocab_size(int(config["vocab_size"]))
        writer.add_rope_dimension_count(source.head_dim)
    if arch == gguf.MODEL_ARCH.GEMMA2:
        writer.add_attn_logit_softcapping(float(config.get("attn_logit_softcapping") or 50.0))
        writer.add_final_logit_softcapping(float(config.get("final_logit_softcapping") or 30.0))
    if arch == gguf.MODEL_ARCH.GEMMA3 and config.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(float(config["final_logit_softcapping"]))
    if arch in (gguf.MODEL_ARCH.GEMMA2, gguf.MODEL_ARCH.GEMMA3) and config.get("sliding_window"):
        writer.add_sliding_window(int(config["sliding_window"]))
    if arch == gguf.MODEL_ARCH.PHI3:
        rotary = float(rope.get("partial_rotary_factor") or config.get("partial_rotary_factor") or 1.0)
        writer.add_rope_dimension_count(int(rotary * int(config["hidden_size"])) // source.heads)
        original = rope.get("original_max_position_embeddings") or config.get("original_max_position_embeddings")
        writer.add_rope_scaling_orig_ctx_len(int(original or config["max_position_embeddings"]))
        writer.add_sliding_window(int(config.get("sliding_window") or 0))


def _write_rope_scaling(writer: gguf.GGUFWriter, source: Source, rope: dict[str, Any]) -> None:
    """Linear, YaRN and long-rope scaling as llama.cpp's converter writes them (Llama 3's is a tensor)."""
    kind = str(rope.get("rope_type") or "default").lower()
    factor = rope.get("factor")
    if kind == "linear" and factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(factor))
    elif kind == "yarn" and factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(factor))
        writer.add_rope_scaling_orig_ctx_len(int(rope["original_max_position_embeddings"]))
        for key, add in (("extrapolation_factor", writer.add_rope_scaling_yarn_ext_factor),
                         ("attention_factor", writer.add_rope_scaling_yarn_attn_factor),
                         ("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
                         ("beta_slow", writer.add_rope_scaling_yarn_beta_slow)):
            if rope.get(key) is not None:
                add(float(rope[key]))
    elif kind in ("su", "longrope"):
        writer.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
        if source.family.arch == gguf.MODEL_ARCH.PHI3:
            context = int(source.config["max_position_embeddings"])
            original = int(rope.get("original_max_position_embeddings")
                           or source.config.get("original_max_position_embeddings") or context)
            scale = context / original
            writer.add_rope_scaling_attn_factors(
                math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0)
    elif kind not in ("default", "llama3"):
        raise UnsupportedModelError(
            f"The model uses the rope scaling \"{kind}\", which llama.cpp cannot be told about in a GGUF file.",
            hint="Export a model with default, linear, YaRN, Llama 3 or long-rope scaling.")


def restore(source: Source, tensor: PlannedTensor, values: torch.Tensor) -> torch.Tensor:
    """The inverse of the planned change: a tensor as read back from the file, as the checkpoint held it."""
    if source.family.norm_shift and tensor.source and tensor.source.endswith("norm.weight"):
        return values - source.family.norm_shift
    if tensor.row_multiple > 1:  # the permuted q/k
        return unpermute_rows(values, tensor.row_multiple)
    return values
