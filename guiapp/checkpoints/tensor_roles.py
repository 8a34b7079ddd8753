"""Tensor roles: which tensors are the token embeddings, the output head, the final norm, layer N, or something
else (and whether it sits before or after the layers), read from names with the tables of `facts.tensor_roles`.

`model.layers.3.mlp.up_proj.weight` (Llama, Mistral, Qwen, Gemma, Phi), `transformer.h.3.attn.c_attn.weight`
(GPT-2), `bert.encoder.layer.3.output.dense.weight` (BERT), `gpt_neox.layers.3.…`, `blocks.3.…` all name
layer 3. Planning, the compatibility check, LoRA extraction and the window all ask here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from guiapp.facts.tensor_roles import (
    ARCHITECTURES,
    BEFORE_LAYERS,
    EMBEDDING_MODULES,
    HEAD_MODULES,
    LAYER_CONTAINERS,
    NORM_MODULES,
)

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
    if short in EMBEDDING_MODULES:
        return TensorPlace(TensorRole.EMBEDDING, before_layers=True)
    top_level = "." not in module or module.startswith("cls.predictions.")
    if short in HEAD_MODULES and (top_level or short != "output" and short != "decoder"):
        return TensorPlace(TensorRole.HEAD)
    if short in NORM_MODULES and (module.count(".") <= 1 or short != "norm"):
        return TensorPlace(TensorRole.NORM)
    return TensorPlace(TensorRole.OTHER, before_layers=bool(BEFORE_LAYERS.search(module)))


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
