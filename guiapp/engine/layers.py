"""The one table of tensor roles: which tensors are the token embeddings, the output head, the final norm, layer
N, or something else (and whether it sits before or after the layers).

Names decide, the way mergekit's architecture files do it: a few architectures whose names mislead a generic
rule are listed as data (ARCHITECTURES); every other model is read by the generic rule from names alone.
`model.layers.3.mlp.up_proj.weight` (Llama, Mistral, Qwen, Gemma, Phi), `transformer.h.3.attn.c_attn.weight`
(GPT-2), `bert.encoder.layer.3.output.dense.weight` (BERT), `gpt_neox.layers.3.…`, `blocks.3.…` all name
layer 3. Planning, the compatibility check, LoRA extraction and the window all ask here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from guiapp.hub.headers import LAYER_CONTAINERS

# Headers naming a layer past MAX_LAYER_INDEX are refused when read (hub.headers.check_layer_indices); a longer
# "index" in a name that was not read from a header is no layer index, and is left as part of an ordinary tensor
# name rather than turned into an int.
_LAYER = re.compile(r"(?P<prefix>(?:^|.*\.)(?:" + "|".join(LAYER_CONTAINERS)
                    + r"))\.(?P<index>\d{1,9})\.(?P<suffix>.+)$")


@dataclass(frozen=True)
class LayerName:
    """A tensor name split around its layer index: `{prefix}.{index}.{suffix}`."""

    prefix: str
    index: int
    suffix: str


def split_layer_name(name: str) -> LayerName | None:
    """The layer parts of `name`, or None for tensors outside the layers (embeddings, final norm, heads)."""
    match = _LAYER.match(name)
    if match is None:
        return None
    return LayerName(match.group("prefix"), int(match.group("index")), match.group("suffix"))


class TensorRole(str, Enum):
    EMBEDDING = "embedding"  # token embeddings: one row per token, before the layers
    HEAD = "head"  # the output projection onto the vocabulary (one row per token), after the layers
    NORM = "norm"  # the final norm, after the layers
    LAYER = "layer"  # a tensor of layer N
    OTHER = "other"  # anything else: position embeddings, poolers, classifier heads…


@dataclass(frozen=True)
class TensorPlace:
    """Where a tensor belongs: its role, its layer (for LAYER) and whether it sits before the layers."""

    role: TensorRole
    layer: LayerName | None = None
    before_layers: bool = False

    @property
    def has_vocabulary_rows(self) -> bool:
        return self.role in (TensorRole.EMBEDDING, TensorRole.HEAD)


# Architectures whose tensor names the generic rule would misread, as data: the full names (or name endings
# after a ".") of their embedding, head and final norm modules, keyed by config.json `architectures` entries.
ARCHITECTURES: dict[str, dict[str, tuple[str, ...]]] = {
    # `embed_out` is the untied output head although its name says "embed" (Pythia, GPT-NeoX-20B).
    "GPTNeoXForCausalLM": {"embedding": ("gpt_neox.embed_in",), "head": ("embed_out",),
                           "norm": ("gpt_neox.final_layer_norm",)},
    # GPT-2 names its token embeddings `wte` and its final norm `ln_f`; `wpe` are position embeddings.
    "GPT2LMHeadModel": {"embedding": ("transformer.wte",), "head": ("lm_head",), "norm": ("transformer.ln_f",)},
    # BERT's masked-LM decoder is tied to the word embeddings and sits after the encoder.
    "BertForMaskedLM": {"embedding": ("bert.embeddings.word_embeddings",), "head": ("cls.predictions.decoder",),
                        "norm": ()},
}

# The generic rule: module names (the last part before `.weight`/`.bias`) of each role in common architectures
# (Llama, Mistral, Qwen2, Gemma, Phi-3, GPT-2, GPT-NeoX, BERT, Falcon, BLOOM, MPT, T5-style `shared`).
_EMBEDDINGS = ("embed_tokens", "embed_in", "wte", "word_embeddings", "tok_embeddings", "shared")
_HEADS = ("lm_head", "embed_out", "output", "decoder")
_NORMS = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "final_norm", "norm_f")
_BEFORE = re.compile(r"(?:^|\.)(?:embeddings?|wpe|embed_positions|position_embeddings)(?:\.|$)")


def tensor_place(name: str, architecture: str | None = None) -> TensorPlace:
    """The role of the tensor `name` in a model of `architecture` (config.json's `architectures[0]`, or None
    when unknown: the generic rule then reads the name alone). Never raises."""
    parts = split_layer_name(name)
    if parts is not None:
        return TensorPlace(TensorRole.LAYER, parts)
    module = name.rpartition(".")[0] if name.endswith((".weight", ".bias")) else name
    listed = ARCHITECTURES.get(architecture or "")
    if listed is not None:
        for role in (TensorRole.EMBEDDING, TensorRole.HEAD, TensorRole.NORM):
            if any(module == entry or module.endswith("." + entry) for entry in listed[role.value]):
                return TensorPlace(role, before_layers=role is TensorRole.EMBEDDING)
    short = module.rpartition(".")[2]
    if short in _EMBEDDINGS:
        return TensorPlace(TensorRole.EMBEDDING, before_layers=True)
    top_level = "." not in module or module.startswith("cls.predictions.")
    if short in _HEADS and (top_level or short != "output" and short != "decoder"):
        return TensorPlace(TensorRole.HEAD)
    if short in _NORMS and (module.count(".") <= 1 or short != "norm"):
        return TensorPlace(TensorRole.NORM)
    return TensorPlace(TensorRole.OTHER, before_layers=bool(_BEFORE.search(module)))


def architecture_of(config: dict | None) -> str | None:
    """config.json's first `architectures` entry, or None when the config names none."""
    architectures = (config or {}).get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return None


def comes_before_layers(name: str, architecture: str | None = None) -> bool:
    """True for tensors outside the layers that sit before them (embeddings), False for the rest."""
    return tensor_place(name, architecture).before_layers


def is_vocabulary_tensor(name: str, architecture: str | None = None) -> bool:
    """Tensors with one row per token: the token embeddings and the output head."""
    return tensor_place(name, architecture).has_vocabulary_rows
