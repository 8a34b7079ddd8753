"""Which files of a model repo a merge or a LoRA job needs (the rest — ONNX, GGUF, originals, images — is skipped)."""

from __future__ import annotations

import re
from collections.abc import Iterable

CONFIG_FILES = {"config.json", "generation_config.json", "adapter_config.json"}
TOKENIZER_FILES = {
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "vocab.txt", "merges.txt", "spiece.model", "chat_template.jinja", "chat_template.json",
}  # fmt: skip
_SHARD = re.compile(r".+-\d+-of-\d+\.(safetensors|bin)$")


def needed_files(filenames: Iterable[str]) -> list[str]:
    """The subset of a repo's `filenames` to download, in their original order.

    Weights: the safetensors checkpoint (the index and its shards when there is an index, else `model.safetensors`
    or the adapter), falling back to `.bin` files only when there is no safetensors. Only top-level files count:
    sub-folders hold other formats (e.g. `original/`, `onnx/`).
    """
    top_level = [name for name in filenames if "/" not in name]
    weights = _weights(top_level, ".safetensors") or _weights(top_level, ".bin")
    keep = set(weights) | {n for n in top_level if n in CONFIG_FILES or n in TOKENIZER_FILES}
    return [name for name in top_level if name in keep]


def _weights(names: list[str], suffix: str) -> list[str]:
    stem = "model" if suffix == ".safetensors" else "pytorch_model"
    if f"{stem}{suffix}.index.json" in names:
        return [f"{stem}{suffix}.index.json"] + [n for n in names if _SHARD.match(n) and n.endswith(suffix)]
    preferred = [n for n in (f"{stem}{suffix}", f"adapter_model{suffix}") if n in names]
    return preferred or [n for n in names if n.endswith(suffix)]
