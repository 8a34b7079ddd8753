"""Writing configurations and running the assembly the way the CLI does, for the MoE tests."""

from __future__ import annotations

from pathlib import Path

import yaml
from safetensors.torch import load_file

from guiapp.moe.assemble import MoeSettings, assemble_moe
from guiapp.moe.config import load_moe_config

PROMPTS = {
    "e0": (["add two numbers", "sum the equation"], []),
    "e1": (["write a poem about the sea", "rhyme"], ["python code"]),
    "e2": (["prove the theorem"], ["story dragon"]),
}


def expert(models: dict[str, Path], name: str, **extra) -> dict:
    positive, negative = PROMPTS[name]
    entry = {"source_model": str(models[name]), "positive_prompts": positive}
    if negative:
        entry["negative_prompts"] = negative
    return {**entry, **extra}


def write_config(folder: Path, document: dict, name: str = "moe.yml") -> Path:
    path = Path(folder) / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def assemble(config_path: Path, out: Path, seed: int = 0) -> dict[str, object]:
    config, text = load_moe_config(config_path)
    assemble_moe(MoeSettings(config, out, seed=seed, config_text=text))
    return load_file(out / "model.safetensors")
