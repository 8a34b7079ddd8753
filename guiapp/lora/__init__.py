"""LoRA adapters beyond extract and apply: DoRA, resizing and combining adapters."""
