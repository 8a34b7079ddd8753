"""The registry of merge methods: each declaration of guiapp.merging.method_declarations with its merge function
attached (a module's `METHOD`, or a row of the task-vector table).

Adding a method is declaring it there and attaching its implementation here; the recipe validator and the merge
read the methods from here, the window (before torch has loaded) and the docs read the declarations.
"""

from __future__ import annotations

import difflib

from guiapp.errors import RecipeError
from guiapp.merging.method_declarations import DECLARATIONS
from guiapp.merging.methods import (
    arcee_fusion,
    karcher,
    linear,
    model_stock,
    multislerp,
    nearswap,
    nuslerp,
    passthrough,
    ram,
    ramplus_tl,
    sce,
    slerp,
)
from guiapp.merging.methods.base import MergeMethod
from guiapp.merging.methods.task_vector_methods import TASK_VECTOR_METHODS

_IMPLEMENTED: dict[str, MergeMethod] = {
    method.name: method
    for method in (
        linear.METHOD,
        *TASK_VECTOR_METHODS.values(),
        slerp.METHOD,
        nuslerp.METHOD,
        multislerp.METHOD,
        karcher.METHOD,
        model_stock.METHOD,
        sce.METHOD,
        ram.METHOD,
        ramplus_tl.METHOD,
        nearswap.METHOD,
        arcee_fusion.METHOD,
        passthrough.METHOD,
    )
}
# In the declarations' order (the window's): a declaration without its merge function fails here, at import.
METHODS: dict[str, MergeMethod] = {name: _IMPLEMENTED[name] for name in DECLARATIONS}


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
