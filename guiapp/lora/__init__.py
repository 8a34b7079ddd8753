"""LoRA adapters: extracting one from a fine-tune and its base, applying one to a base, and the low-rank maths."""
