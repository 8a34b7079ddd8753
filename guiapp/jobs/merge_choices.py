"""What the Merge page offers to choose from: the merge methods with their declared parameters, and the chat
templates Mergesmith ships."""

from __future__ import annotations

from typing import Any

from guiapp.merging.chat_template_names import BUILT_IN_CHAT_TEMPLATES  # torch-free: names of files only


def load_merge_methods() -> dict[str, Any]:
    """Every merge method by name (guiapp.merging.methods.base.MergeMethod: its parameters, their kinds, ranges
    and defaults), with the merge engine loaded so that the first check of a recipe is quick. Imports torch: call
    it off the UI thread. Raises ImportError (or OSError) when PyTorch cannot be loaded."""
    import guiapp.merging.merge  # noqa: F401 - loaded with the methods so the first validation is quick
    from guiapp.merging.methods import METHODS

    return dict(METHODS)


def chat_template_names() -> tuple[str, ...]:
    """The names of the chat templates Mergesmith ships (mergekit's names), sorted. Never raises."""
    return BUILT_IN_CHAT_TEMPLATES
