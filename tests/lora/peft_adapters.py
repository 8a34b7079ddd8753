"""Adapters made by PEFT itself for the DoRA and toolbox tests, and PEFT's own results to compare with."""

from __future__ import annotations

from pathlib import Path

import torch


def peft_model(base: Path, config, seed: int, magnitude_noise: float = 0.0):
    """`base` with a fresh PEFT adapter of `config` (random factors: it changes the output); DoRA magnitudes
    moved by `magnitude_noise` (relative), since fresh ones equal the weight's norms and would cancel out."""
    import peft
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    wrapped = peft.get_peft_model(model, config)
    for module in wrapped.modules():
        for magnitude in getattr(module, "lora_magnitude_vector", {}).values():
            magnitude.weight.data.mul_(1 + magnitude_noise * torch.randn_like(magnitude.weight))
    return wrapped


def write_peft_adapter(base: Path, folder: Path, seed: int = 0, magnitude_noise: float = 0.0, **options) -> Path:
    """A PEFT adapter for `base` saved by PEFT; `options` go to `peft.LoraConfig`."""
    import peft

    options = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"],
               "init_lora_weights": False, "task_type": "CAUSAL_LM", **options}
    model = peft_model(base, peft.LoraConfig(**options), seed, magnitude_noise)
    model.save_pretrained(folder, save_embedding_layers=False)
    return folder


def peft_merged(base: Path, adapter: Path, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The state dict of `base` with `adapter` merged by PEFT's own `merge_and_unload()`."""
    import peft
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    merged = peft.PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return {name: tensor.detach() for name, tensor in merged.state_dict().items()}
