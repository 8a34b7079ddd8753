"""Quantized copies of a model folder, written in each format's published layout (bitsandbytes' with its own
quantize functions)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

LINEAR = ("_proj.weight",)


def quantized_copy(source: Path, target: Path, quantize: Callable[[str, torch.Tensor], dict[str, torch.Tensor]],
                   settings: dict | None) -> Path:
    """`source`'s model with every linear weight replaced by `quantize(name, weight)`'s tensors, its config given
    `settings` as quantization_config (None: left without one). Other files are copied."""
    shutil.copytree(source, target)
    (target / "model.safetensors").unlink()
    stored: dict[str, torch.Tensor] = {}
    for name, tensor in load_file(source / "model.safetensors").items():
        stored.update(quantize(name, tensor) if name.endswith(LINEAR) else {name: tensor})
    save_file({n: t.contiguous() for n, t in stored.items()}, target / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((target / "config.json").read_text())
    if settings is not None:
        config["quantization_config"] = settings
    (target / "config.json").write_text(json.dumps(config))
    return target


def bnb_4bit(quant_type: str = "nf4", double: bool = True, blocksize: int = 64):
    """A quantize function writing what transformers' save_pretrained writes for a bitsandbytes 4-bit Linear."""
    import bitsandbytes.functional as F  # noqa: PLC0415 - the reference library, imported by the tests using it

    def quantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        packed, state = F.quantize_4bit(weight, quant_type=quant_type, compress_statistics=double,
                                        blocksize=blocksize)
        return {name: packed, **{f"{name}.{key}": value for key, value in state.as_dict(packed=True).items()}}

    return quantize


def bnb_4bit_settings(quant_type: str = "nf4", double: bool = True) -> dict:
    return {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": quant_type,
            "bnb_4bit_use_double_quant": double, "bnb_4bit_compute_dtype": "bfloat16"}


def bnb_8bit(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    """What save_pretrained writes for a bitsandbytes LLM.int8 Linear: int8 weight, module.SCB, weight_format."""
    import bitsandbytes.functional as F  # noqa: PLC0415 - the reference library

    codes, scales, _ = F.int8_vectorwise_quant(weight.half())
    module = name.removesuffix(".weight")
    return {name: codes, f"{module}.SCB": scales.float(), f"{module}.weight_format": torch.tensor(0, dtype=torch.uint8)}


BNB_8BIT_SETTINGS = {"quant_method": "bitsandbytes", "load_in_8bit": True}
