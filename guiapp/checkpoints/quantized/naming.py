"""What a config's quantization settings say, in words, without torch (for `hub info`, which never loads it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def settings_summary(config: Mapping[str, Any] | None) -> str | None:
    """"4-bit bitsandbytes (nf4, double quantized), read dequantized to bfloat16" for a quantized model's config,
    None for a config without quantization settings. Never raises: odd settings give a vaguer text."""
    settings = (config or {}).get("quantization_config")
    if not isinstance(settings, Mapping):
        return None
    method = str(settings.get("quant_method") or "unknown method")
    dtype = str((config or {}).get("torch_dtype") or (config or {}).get("dtype") or "bfloat16")
    if method == "bitsandbytes":
        if settings.get("load_in_8bit"):
            kind = "8-bit bitsandbytes (LLM.int8)"
        else:
            double = ", double quantized" if settings.get("bnb_4bit_use_double_quant") else ""
            kind = f"4-bit bitsandbytes ({settings.get('bnb_4bit_quant_type', 'fp4')}{double})"
    elif method in ("gptq", "awq"):
        kind = f"{settings.get('bits', settings.get('w_bit', 4))}-bit {method.upper()}"
    elif method in ("fp8", "fbgemm_fp8"):
        block = settings.get("weight_block_size")
        kind = "FP8" + (f" ({block[0]}x{block[1]} blocks)" if isinstance(block, list) and len(block) == 2 else "")
    elif method == "mxfp4":
        kind = "MXFP4"
    else:
        kind = f"{method} ({settings.get('format', 'quantized')})" if method == "compressed-tensors" else method
    return f"{kind}, read dequantized to {dtype.removeprefix('torch.')}"
