"""The registry of merge methods: one module per method, each defining `METHOD`.

Adding a method is adding a module and a line to `_MODULES`; the window and the recipe validator read the
schema from here.
"""

from __future__ import annotations

import difflib
import importlib

from guiapp.errors import RecipeError
from guiapp.merging.methods.base import MergeMethod

_MODULES = (
    "linear",
    "task_arithmetic",
    "ties",
    "dare_ties",
    "dare_linear",
    "breadcrumbs",
    "breadcrumbs_ties",
    "della",
    "della_linear",
    "slerp",
    "nuslerp",
    "multislerp",
    "karcher",
    "model_stock",
    "sce",
    "ram",
    "ramplus_tl",
    "nearswap",
    "arcee_fusion",
    "passthrough",
)

METHODS: dict[str, MergeMethod] = {
    method.name: method
    for method in (importlib.import_module(f"{__name__}.{module}").METHOD for module in _MODULES)
}


def get_method(name: str) -> MergeMethod:
    """Return the method called `name`.

    Raises RecipeError listing the valid names (and the closest match) when there is none.
    """
    try:
        return METHODS[name]
    except KeyError:
        close = difflib.get_close_matches(str(name).lower().replace("-", "_"), METHODS, n=1)
        suggestion = f' Did you mean "{close[0]}"?' if close else ""
        raise RecipeError(
            f'Unknown merge method "{name}".{suggestion}',
            hint="Valid methods: " + ", ".join(sorted(METHODS)) + ".",
            key="merge_method",
        ) from None
