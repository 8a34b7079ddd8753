"""A recipe parameter's value across the layers, for the picture of a gradient, and the value after one of its
points is moved. No Qt.

The per-layer values come from the engine's own interpolation (`recipe.evaluate` at `recipe.layer_position`), so
the picture shows what the merge will use. A value may be a list of numbers (one curve), or a list of
`{filter, value}` entries (one curve per entry: `self_attn`, `mlp`, and the entry without a filter for the rest).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from guiapp.errors import RecipeError
from guiapp.merging.recipe import as_number, evaluate, is_missing, layer_position
from guiapp.system.bounded import describe_value

# Dragged values are written with this many decimals (what a person would type).
DECIMALS = 3


@dataclass(frozen=True)
class GradientCurve:
    """One curve: its anchors (the numbers written in the recipe, spread evenly from the first layer to the last)
    and, when the number of layers is known, the value at each layer. `entry` is the index of the
    `{filter, value}` entry it comes from (None for a plain list)."""

    label: str
    entry: int | None
    anchors: tuple[float, ...]
    layer_values: tuple[float, ...]

    def anchor_position(self, index: int) -> float:
        """Where anchor `index` sits from the first layer (0) to the last (1)."""
        return layer_position(index, len(self.anchors)) if len(self.anchors) > 1 else 0.5


def gradient_curves(value: Any, layer_count: int | None) -> list[GradientCurve]:
    """The curves of a parameter's `value`, with per-layer values for `layer_count` layers (none when unknown).

    Entries that are not numbers (booleans, text) have no curve. Never raises: a value the engine would refuse
    gives no curve (the recipe check reports it).
    """
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not value:
        return []
    if all(isinstance(entry, dict) for entry in value):
        curves = []
        for index, entry in enumerate(value):
            pattern = entry.get("filter")
            label = "other tensors" if pattern in (None, "*") else str(pattern)
            curve = _curve(entry.get("value"), label, index, layer_count)
            if curve is not None:
                curves.append(curve)
        return curves
    curve = _curve(value, "all tensors", None, layer_count)
    return [curve] if curve is not None else []


def with_anchor(value: Any, entry: int | None, anchor: int, number: float) -> Any:
    """A copy of `value` with anchor `anchor` of the curve of `entry` (see `GradientCurve.entry`) set to `number`
    (rounded to `DECIMALS`). A single number in a `{filter, value}` entry is its only anchor.

    Raises RecipeError when there is no such anchor (the value changed under the chart).
    """
    changed = copy.deepcopy([value] if isinstance(value, dict) else value)
    number = round(float(number), DECIMALS)
    missing = RecipeError(f"The value {describe_value(value)} has no point {anchor + 1} to move.")
    try:
        if entry is None:
            changed[anchor] = number
        elif isinstance(changed[entry]["value"], list):
            changed[entry]["value"][anchor] = number
        elif anchor == 0:
            changed[entry]["value"] = number
        else:
            raise missing
    except (IndexError, KeyError, TypeError):
        raise missing from None
    return changed


def _curve(value: Any, label: str, entry: int | None, layer_count: int | None) -> GradientCurve | None:
    numbers = [as_number(v) for v in value] if isinstance(value, list) else [as_number(value)]
    if not numbers or any(n is None for n in numbers):
        return None
    try:
        layers = [evaluate(value, "", layer_position(i, layer_count)) for i in range(layer_count or 0)]
    except RecipeError:
        return None
    if any(is_missing(v) or as_number(v) is None for v in layers):
        return None
    return GradientCurve(label, entry, tuple(float(n) for n in numbers), tuple(float(v) for v in layers))


def gradient_in_words(value: Any) -> str | None:
    """A plain list of numbers said in words: "0.2 at the first layer → 0.9 at the last" ("0.2 → 0.5 → 0.9, from
    the first layer to the last" with points between); None for anything else (filters, text), which is shown as
    written."""
    if not isinstance(value, list) or len(value) < 2 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return None
    numbers = [f"{v:g}" for v in value]
    if len(numbers) == 2:
        return f"{numbers[0]} at the first layer → {numbers[1]} at the last"
    return f"{' → '.join(numbers)}, from the first layer to the last"
