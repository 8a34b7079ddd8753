"""RAM+ (tensor-local): RAM with each model's unique changes boosted by its share of overlapping changes."""

from __future__ import annotations

from guiapp.merging.methods._ram import ram_method

METHOD = ram_method(boosted=True)
