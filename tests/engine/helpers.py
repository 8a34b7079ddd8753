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


def float32_trio_in(folder: Path, layers: int) -> tuple[Path, Path, Path]:
    """A float32 base and two full-rank fine-tunes of it (seeds 0, 1, 2), written in `folder`."""
    from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune

    base = write_llama(folder / "base", LlamaShape(layers=layers), dtype=torch.float32, seed=0)
    return base, write_llama_finetune(folder / "one", base, seed=1, delta_rank=None), \
        write_llama_finetune(folder / "two", base, seed=2, delta_rank=None)


# Methods that take a base and exactly one other model.
TWO_INPUTS = {"slerp", "nearswap", "arcee_fusion"}


def recipe_for_method(method: str, base: Path, one: Path, two: Path) -> str:
    """A recipe that merges the trio with `method`, with parameters it accepts."""
    if method == "passthrough":
        return f"merge_method: passthrough\nmodels:\n  - model: {one}\n"
    if method in TWO_INPUTS:
        extra = {"slerp": "parameters: {t: 0.3}\n", "nearswap": "parameters: {t: 0.001}\n"}.get(method, "")
        return f"merge_method: {method}\nbase_model: {base}\nmodels:\n  - model: {one}\n{extra}"
    weights = "weight: 0.6, density: 0.7" if method not in ("karcher", "model_stock", "ram", "ramplus_tl", "sce") else "weight: 0.6"
    if method.startswith("della"):
        weights += ", epsilon: 0.1"
    base_line = "" if method in ("karcher", "linear") else f"base_model: {base}\n"
    return (f"merge_method: {method}\n{base_line}models:\n  - model: {one}\n    parameters: {{{weights}}}\n"
            f"  - model: {two}\n    parameters: {{{weights}}}\n")
