"""The words the window uses for the merge methods' recipe keys and for choosing a method. No Qt.

A recipe key (`rescale`, `int8_mask`, `lambda`) stays what the YAML and mergekit use; the window labels it in
plain words and shows the key in the tooltip (a key missing here still works: it is shown by name). The methods
are offered in the groups their declarations name, each with the method recommended when in doubt.
"""

from __future__ import annotations

import re
from typing import Any

# Recipe key → its label in the window.
PARAMETER_LABELS = {
    "weight": "Weight",
    "density": "Keep this fraction of changes",
    "normalize": "Normalise weights",
    "normalize_weights": "Normalise weights",
    "lambda": "Scale the result (λ)",
    "rescale": "Rescale kept changes",
    "int8_mask": "Save memory (int8 mask)",
    "gamma": "Drop this fraction of outliers",
    "epsilon": "Spread of keep chances (ε)",
    "t": "Position between the models (t)",
    "nuslerp_flatten": "Whole tensors at once",
    "nuslerp_row_wise": "Columns instead of rows",
    "eps": "Tiny-number guard (ε)",
    "max_iter": "Most refinement steps",
    "tol": "Stop when steps are this small",
    "filter_wise": "Measure agreement per row",
    "select_topk": "Keep this fraction of positions",
    "r": "Boost for unique changes (r)",
    "alpha": "Boost cap (α)",
    "scale": "Scale this model",
}


def parameter_label(spec: Any) -> str:
    """The window's label for a method's parameter (a ParamSpec): its own label where the method gives one, else
    the words for its recipe key, else the key itself made readable."""
    return spec.label or PARAMETER_LABELS.get(spec.name) or spec.name.replace("_", " ").capitalize()


def parameter_tooltip(spec: Any) -> str:
    """A method's parameter's tooltip (a ParamSpec): what it does, then the key the recipe uses for it."""
    return f"{spec.help}\nRecipe key: {spec.name}" if spec.help else f"Recipe key: {spec.name}"


_TENSOR_NOTE = re.compile(r"\s*\((?:needed for |first at )?tensor [^)]*\)")


def recipe_words(text: str, method: Any, references: list[str]) -> str:
    """A check's `text` about a recipe in the form's words: each of `method`'s parameter keys (`density`) becomes
    its label ("Keep this fraction of changes"), each model reference in `references` (a path, a Hub id) its short
    name, and the tensor the engine met it at is left out (the command line keeps all three)."""
    from guiapp.jobs.naming import input_name

    text = _TENSOR_NOTE.sub("", text)
    specs = [*method.per_model_params, *method.global_params] if method is not None else []
    for spec in specs:
        text = text.replace(f"`{spec.name}`", f"“{parameter_label(spec)}”")
    for reference in sorted({str(r) for r in references if r}, key=len, reverse=True):
        # Whole references only: "org/a" is not the start of "org/a-v2".
        text = re.sub(rf"(?<![\w/.-]){re.escape(reference)}(?![\w/-]|\.\w)", input_name(reference), text)
    return text


def grouped_methods(methods: dict[str, Any]) -> list[tuple[Any, list[str]]]:
    """The names of `methods` (name → MergeMethod) under each method's group (a MethodGroup), the groups in the
    order the window lists them and each group's recommended method first, the others in registry order."""
    from guiapp.merging.method_schema import METHOD_GROUPS

    return [(group, sorted(members, key=lambda name: name != group.recommended))
            for group in METHOD_GROUPS if (members := [n for n, m in methods.items() if m.group == group])]
