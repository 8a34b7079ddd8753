from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from guiapp.checkpoints.samples import write_llama
from tests.quantized.helpers import bnb_4bit, bnb_4bit_settings, quantized_copy
from tests.tryout.models import write_causal, write_lora_adapter


@pytest.fixture(scope="session")
def llama_base(tmp_path_factory):
    """A tiny bf16 Llama with a tokenizer: the model every quantized copy is made from."""
    from guiapp.checkpoints.samples import write_byte_tokenizer  # noqa: PLC0415 - only this fixture needs it

    folder = write_llama(tmp_path_factory.mktemp("llama") / "base", dtype=torch.bfloat16)
    write_byte_tokenizer(folder)
    return folder


@pytest.fixture(scope="session")
def qlora(tmp_path_factory):
    """(4-bit base, its adapter, the base dequantized by bitsandbytes and written as a plain bf16 model, the
    unquantized original)."""
    F = pytest.importorskip("bitsandbytes.functional")
    root = tmp_path_factory.mktemp("qlora")
    original = write_causal(root / "original", torch.bfloat16, seed=4)
    base = quantized_copy(original, root / "bnb4", bnb_4bit("nf4", True), bnb_4bit_settings("nf4", True))
    stored = load_file(base / "model.safetensors")

    def dequantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        state = F.QuantState.from_dict({k.removeprefix(name + "."): v for k, v in stored.items()
                                        if k.startswith(name + ".")}, device=torch.device("cpu"))
        return {name: F.dequantize_4bit(stored[name], state)}

    reference = quantized_copy(original, root / "reference", dequantize, None)
    return base, write_lora_adapter(original, root / "adapter", seed=5), reference, original
