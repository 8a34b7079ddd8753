"""One-click fixes for recipe problems whose fix is clear: a missing value gets the suggested one, a value out of
range the nearest allowed one, an unusable dtype is removed, and a base that a linear-like method merges as one
more input gets a row with its weight. The window shows the fix's label on a button and applies it to the recipe
document as one undo step. Nothing here imports Qt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from guiapp.errors import KeyPath, RecipeError
from guiapp.hub.references import ModelRef
from guiapp.jobs.plain_words import parameter_label
from guiapp.jobs.recipe_document import RecipeDocument


@dataclass(frozen=True)
class RecipeFix:
    """A fix in words (`label`, for a button) and the change that makes it (`apply`, one undo step)."""

    label: str
    apply: Callable[[RecipeDocument], None]


def suggested_value(spec: Any) -> float | int:
    """The value offered for a parameter the recipe lacks: its default, else the value its method suggests, else the
    middle of its usual range (else its allowed one) when it has both ends (an interpolation factor), else 1 brought into its range (a weight)."""
    if spec.default is not None:
        return spec.default
    if spec.suggested is not None:
        return spec.suggested
    low, high = spec.span
    if low is not None and high is not None:
        value = (low + high) / 2
    else:
        value = min(max(1.0, low if low is not None else 1.0), high if high is not None else 1.0)
    return round(value) if spec.kind == "int" else float(value)


def fix_for(key: KeyPath, document: dict[str, Any], method: Any) -> RecipeFix | None:
    """The one-click fix for a problem at recipe `key` in `document` (merged with `method`), or None when the fix
    is the user's choice (which base, which model) or the value is one the form cannot guess (a gradient)."""
    if key in (("dtype",), ("out_dtype",)) and key[0] in document:
        name = key[0]
        label = (f"Remove “dtype: {document[name]}”" if name == "dtype"
                 else "Store the result in the models' own dtype")
        return RecipeFix(label, lambda recipe: recipe.replace({k: v for k, v in recipe.data.items() if k != name}))
    if method is None:
        return None
    if len(key) == 2 and key[0] == "parameters":
        spec = method.param(str(key[1]))
        if spec is None or spec.per_model:
            return None
        return _value_fix(spec, _mapping(document.get("parameters")), None, "")
    if len(key) == 4 and key[0] == "models" and isinstance(key[1], int) and key[2] == "parameters":
        spec = method.param(str(key[3]))
        if spec is None or not spec.per_model:
            return None
        entries = document.get("models") if isinstance(document.get("models"), list) else []
        if key[1] < len(entries):
            entry = entries[key[1]]
            parameters = _mapping(entry.get("parameters")) if isinstance(entry, dict) else {}
            reference = entry.get("model", "") if isinstance(entry, dict) else entry
            return _value_fix(spec, parameters, key[1], f" for {short_name(reference)}")
        base = document.get("base_model")
        if base and method.base_role.value == "input":  # the base is merged as one more input: give it a row
            required = [s for s in method.per_model_params if s.required]
            values = {s.name: suggested_value(s) for s in required}
            said = ", ".join(f"{parameter_label(s)} {values[s.name]:g}" for s in required)
            return RecipeFix(f"Add the base ({short_name(base)}) with {said}",
                             lambda recipe: recipe.add_model(str(base), values))
    return None


def short_name(reference: Any) -> str:
    """A model's reference as a person names it (ModelRef.short_name), or as written when it is not one."""
    try:
        return ModelRef.parse(reference).short_name
    except RecipeError:
        return str(reference)


def _value_fix(spec: Any, scope: dict[str, Any], model: int | None, whose: str) -> RecipeFix | None:
    """Set a missing or non-numeric value to the suggested one, or bring a number into the allowed range."""
    value = scope.get(spec.name)
    if isinstance(value, (list, dict)):
        return None  # a gradient or filters: the user's to change
    if spec.kind == "bool":
        if isinstance(value, bool):
            return None
        wanted: Any = bool(spec.default)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if spec.minimum is not None and value < spec.minimum:
            wanted = spec.minimum
        elif spec.maximum is not None and value > spec.maximum:
            wanted = spec.maximum
        else:
            return None
    else:
        wanted = suggested_value(spec)
    shown = ("on" if wanted else "off") if spec.kind == "bool" else f"{wanted:g}"
    return RecipeFix(f"Set {parameter_label(spec)} to {shown}{whose}",
                     lambda recipe: recipe.set_parameter(spec.name, wanted, model))


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
