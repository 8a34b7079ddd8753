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


def peft_weighted(base: Path, adapters: list[Path], weights: list[float], method: str, **options):
    """PEFT's own `add_weighted_adapter` over `adapters`: the PeftModel with the result active as "merged"."""
    import peft
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    wrapped = peft.PeftModel.from_pretrained(model, adapters[0], adapter_name="a0")
    for index, adapter in enumerate(adapters[1:], start=1):
        wrapped.load_adapter(adapter, adapter_name=f"a{index}")
    names = [f"a{index}" for index in range(len(adapters))]
    wrapped.add_weighted_adapter(names, weights, "merged", combination_type=method, **options)
    wrapped.set_adapter("merged")
    return wrapped


def adapter_state(model, name: str) -> dict[str, torch.Tensor]:
    """The tensors PEFT would save for adapter `name` of `model`, under the keys of adapter_model.safetensors."""
    import peft

    return {key: tensor.detach() for key, tensor in peft.get_peft_model_state_dict(model, adapter_name=name).items()}


def logits(model, tokens: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(tokens).logits
