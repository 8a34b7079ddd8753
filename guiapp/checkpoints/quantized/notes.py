"""What a job's output and warnings say about inputs that were read dequantized."""

from __future__ import annotations

from guiapp.checkpoints.quantized.layout import Quantization


def dequantized_from(quantization: Quantization | None) -> str:
    """" (read dequantized from 4-bit (nf4) to bfloat16)" for a model card's line about a quantized input; ""
    for the others."""
    if quantization is None:
        return ""
    return f" (read dequantized from {quantization.description} to {quantization.dtype})"


def task_vector_warning(quantized: list[tuple[str, Quantization]], base: str | None) -> list[str]:
    """The warning for a merge that takes task vectors (differences from `base`) from quantized inputs `quantized`
    (label, quantization); [] when there is no base or no quantized input."""
    if base is None or not quantized:
        return []
    names = ", ".join(f"{label} ({facts.description})" for label, facts in quantized)
    return [f"{names} {'is' if len(quantized) == 1 else 'are'} quantized: each task vector (a model's difference "
            f"from the base {base}) includes the quantisation noise, which can be as large as what fine-tuning "
            "changed. Prefer the unquantized originals for task-vector methods (TIES, DARE, task arithmetic…)."]
