"""What the Merge page offers to choose from: the merge methods' declarations (read at once, torch-free), the
methods themselves (loaded with torch, off the UI thread), and the chat templates Mergesmith ships."""

from __future__ import annotations

from typing import Any

from guiapp.merging.chat_template_names import BUILT_IN_CHAT_TEMPLATES  # torch-free: names of files only


def merge_method_declarations() -> dict[str, Any]:
    """Every merge method's declaration by name, in the order the window lists them
    (guiapp.merging.method_schema.MethodDeclaration: its group, words and parameters with their kinds, ranges and
    defaults). Torch-free and quick: the Merge page is built from it at once. Never raises."""
    from guiapp.merging.method_declarations import DECLARATIONS

    return dict(DECLARATIONS)


def load_merge_methods() -> dict[str, Any]:
    """Every merge method by name (guiapp.merging.methods.base.MergeMethod: its declaration and merge function),
    with the merge engine loaded so that the first check of a recipe is quick. Imports torch: call it off the UI
    thread. Raises ImportError (or OSError) when PyTorch cannot be loaded."""
    import guiapp.merging.merge  # noqa: F401 - loaded with the methods so the first validation is quick
    from guiapp.merging.methods import METHODS

    return dict(METHODS)


def chat_template_names() -> tuple[str, ...]:
    """The names of the chat templates Mergesmith ships (mergekit's names), sorted. Never raises."""
    return BUILT_IN_CHAT_TEMPLATES
