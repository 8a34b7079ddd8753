"""Mergesmith: merge open models and extract LoRA adapters on your own workstation.

Importing this package must stay cheap: it never imports torch or Qt.
"""

__version__ = "0.1.0"
