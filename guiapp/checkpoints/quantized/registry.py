"""Which quantized format a checkpoint is in (its quantization_config, else its side tensors' names), and the
format's planner that tells how each of its weights dequantizes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guiapp.checkpoints.quantized import bitsandbytes, compressed_tensors, fp8, gptq, mxfp4
from guiapp.checkpoints.quantized.layout import Planner, QuantizedLayout, ReadStored, Stored
from guiapp.errors import UnknownQuantizationError


def _planners() -> dict[str, Planner]:
    return {
        "bitsandbytes": bitsandbytes.plan, "fp8": fp8.plan, "fbgemm_fp8": fp8.plan,
        "compressed-tensors": compressed_tensors.plan, "gptq": gptq.plan_gptq, "awq": gptq.plan_awq,
        "mxfp4": mxfp4.plan,
    }


def supported_methods() -> tuple[str, ...]:
    """The quant_method values Mergesmith dequantizes."""
    return tuple(_planners())


def _sniff(stored: Mapping[str, Stored]) -> str | None:
    """The format a checkpoint without a quantization_config is in, from its side tensors' names."""
    names = stored.keys()
    for suffix, method in ((".absmax", "bitsandbytes"), (".SCB", "bitsandbytes"), ("_blocks", "mxfp4"),
                           (".weight_scale_inv", "fp8"), (".weight_packed", "compressed-tensors"), (".qweight", "gptq")):
        # MXFP4 blocks come with their scales; a plain tensor may end in "_blocks" too
        partner = {"_blocks": "_scales"}.get(suffix)
        if any(name.endswith(suffix) and (partner is None or name.removesuffix(suffix) + partner in names)
               for name in names):
            return method
    return None


def quantized_layout(stored: Mapping[str, Stored], config: Mapping[str, Any] | None, label: str,
                     read: ReadStored | None) -> QuantizedLayout | None:
    """How `stored` (a model's stored tensors) dequantizes, or None for a model that is not quantized.

    `read` reads small side tensors (bitsandbytes' settings, compressed-tensors' shapes); None where no data can be
    read (a Hub model's headers), then the shapes that need it are refused. Raises UnknownQuantizationError for a
    quant_method without a dequantizer and QuantizedCheckpointError when the tensors disagree with the settings.
    """
    settings = (config or {}).get("quantization_config")
    settings = settings if isinstance(settings, Mapping) else {}
    method = str(settings.get("quant_method") or "").lower() or _sniff(stored)
    if not method:
        return None
    planners = _planners()
    if method not in planners:
        raise UnknownQuantizationError(
            f'{label} is quantized with "{method}", which Mergesmith cannot read yet.',
            why=f"Each quantization method packs weights its own way; Mergesmith dequantizes "
            f"{', '.join(sorted(planners))}.",
            hint="Use the model's unquantized original (its model card usually names it) or a copy quantized "
            "with one of those methods.",
        )
    return planners[method](stored, settings, config or {}, label, read)
