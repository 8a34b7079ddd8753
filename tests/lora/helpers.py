"""Building fine-tunes with known updates, and reading adapters and models back, for the LoRA tests."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file

from guiapp.checkpoints.reading import open_checkpoint
from guiapp.checkpoints.samples import write_checkpoint
from guiapp.lora.extract import ExtractionSettings, extract_lora
from guiapp.lora.lowrank import RankRule


def finetune(
    base: Path,
    out: Path,
    *,
    rank_of: Callable[[str], int] = lambda module: 4,
    scale: float = 0.05,
    noise: float = 0.0,
    shift_1d: float = 0.01,
    only: str | None = None,
    dtype: torch.dtype | None = None,
    seed: int = 1,
) -> Path:
    """A "fine-tune" of `base`: each 2-D weight gets an update of rank `rank_of(module)` (0: unchanged) plus
    full-rank `noise`; each 1-D tensor (norms, biases) a shift of `shift_1d`. `only` (a regex) limits the
    changes to matching tensor names."""
    generator = torch.Generator().manual_seed(seed)
    source = open_checkpoint(base)
    tensors = {}
    for name in source.tensors:
        weight = source.read(name).float()
        if only is None or re.search(only, name):
            if weight.ndim == 2:
                rank = rank_of(name.rpartition(".")[0])
                if rank:
                    left = torch.randn(weight.shape[0], rank, generator=generator)
                    right = torch.randn(rank, weight.shape[1], generator=generator)
                    weight = weight + left @ right * (scale / rank**0.5)
                if noise:
                    weight = weight + torch.randn(weight.shape, generator=generator) * noise
            elif shift_1d:
                weight = weight + torch.randn(weight.shape, generator=generator) * shift_1d
        tensors[name] = weight
    config = json.loads((base / "config.json").read_text())
    storage = dtype or next(iter(source.tensors.values())).dtype
    config["torch_dtype"] = str(storage).removeprefix("torch.")
    source.close()
    return write_checkpoint(out, tensors, config, storage)


def extract(base: Path, model: Path, out: Path, rule: RankRule = RankRule("fixed", 8), **options) -> dict:
    return extract_lora(ExtractionSettings(str(base), str(model), out, rule=rule, **options))


def adapter_config(folder: Path) -> dict:
    return json.loads((folder / "adapter_config.json").read_text())


def adapter_report(folder: Path) -> dict:
    return json.loads((folder / "extraction_report.json").read_text())


def adapter_tensors(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "adapter_model.safetensors")


def model_tensors(folder: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(file))
    return tensors


def max_relative_difference(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> float:
    """The largest ‖a − b‖/‖b‖ over tensors of the same name (the two must hold the same names)."""
    assert set(left) == set(right)
    worst = 0.0
    for name, b in right.items():
        a, b = left[name].double(), b.double()
        worst = max(worst, float((a - b).norm() / b.norm().clamp_min(1e-30)))
    return worst
