"""RAM, Reinforced Agent Merging: unique changes kept whole, shared changes averaged."""

from __future__ import annotations

from guiapp.merging.methods._ram import ram_method

METHOD = ram_method(boosted=False)
