"""Recognising transformer layers from tensor names alone, so no per-architecture table is needed.

`model.layers.3.mlp.up_proj.weight` (Llama, Mistral, Qwen, Gemma, Phi), `transformer.h.3.attn.c_attn.weight`
(GPT-2), `bert.encoder.layer.3.output.dense.weight` (BERT), `blocks.3.…` all name layer 3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LAYER = re.compile(r"(?P<prefix>(?:^|.*\.)(?:layers|layer|h|blocks))\.(?P<index>\d+)\.(?P<suffix>.+)$")
_EMBEDDING = re.compile(r"embed|(?:^|\.)wte\.|(?:^|\.)wpe\.|(?:^|\.)tok_embeddings\.")


@dataclass(frozen=True)
class LayerName:
    """A tensor name split around its layer index: `{prefix}.{index}.{suffix}`."""

    prefix: str
    index: int
    suffix: str

    def with_index(self, index: int) -> str:
        return f"{self.prefix}.{index}.{self.suffix}"


def split_layer_name(name: str) -> LayerName | None:
    """The layer parts of `name`, or None for tensors outside the layers (embeddings, final norm, heads)."""
    match = _LAYER.match(name)
    if match is None:
        return None
    return LayerName(match.group("prefix"), int(match.group("index")), match.group("suffix"))


def count_layers(names: list[str] | dict) -> int:
    """The number of layers a model has: one more than the highest layer index among its tensor names."""
    indices = [parts.index for parts in map(split_layer_name, names) if parts is not None]
    return max(indices) + 1 if indices else 0


def comes_before_layers(name: str) -> bool:
    """True for tensors that sit before the layers (embeddings), False for those after (final norm, heads)."""
    return bool(_EMBEDDING.search(name))


def is_vocabulary_tensor(name: str) -> bool:
    """Tensors with one row per token: input embeddings and the output head."""
    return bool(re.search(r"embed_tokens|word_embeddings|(?:^|\.)wte\.|tok_embeddings|lm_head|(?:^|\.)output\.weight$", name))
