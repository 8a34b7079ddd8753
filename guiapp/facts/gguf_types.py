"""The GGUF file types offered, in plain words: plain data, so the command line's help and the window can name them
without loading gguf, NumPy or torch."""

from __future__ import annotations

# Name → what it means for the person choosing, most precise first.
KIND_WORDS = {
    "f32": "full precision, the largest; for converting further",
    "f16": "as good as the original; twice the size of Q8_0",
    "bf16": "as good as the original; twice the size of Q8_0",
    "q8_0": "practically as good as the original",
    "q6_k": "very close to the original",
    "q5_k_m": "close to the original; a good balance",
    "q4_k_m": "runs on most laptops; a little less accurate",
    "q4_0": "small and simple; less accurate than Q4_K_M",
}
