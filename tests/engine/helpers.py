"""Small helpers for engine tests: reading outputs back and fingerprinting inputs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from safetensors.torch import load_file

from guiapp.merging.recipe import parse_recipe


def load_folder(folder: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(file))
    return tensors


def fingerprint(folder: Path) -> dict[str, str]:
    """Content hashes of every file under `folder`, to prove inputs are never modified."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).rglob("*")) if p.is_file()
    }


def recipe(text: str):
    return parse_recipe(text)


def leftovers(parent: Path) -> list[str]:
    """Names in `parent` that a failed job may have left: staging folders or anything unexpected."""
    return sorted(p.name for p in Path(parent).iterdir()
                  if any(part in p.name for part in ("mergesmith-partial", "mergesmith-old", "mergesmith-lock")))
