"""What the lab may change in a recipe: each number the recipe gives to a numeric parameter of its method, with
the range the method's schema allows (`ParamSpec.span`), and the recipe with chosen values put in their places.

A number is tunable where the recipe writes it: a scalar (`weight: 0.5`), each point of a gradient
(`t: [0, 0.5, 1]`), or the value of a filtered entry (`{filter: mlp, value: 0.3}`). Parameters the recipe leaves
to their defaults are not searched (the user adds them to the recipe to search them).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from guiapp.errors import RecipeError, SettingsError
from guiapp.merging.method_schema import ParamKind, ParamSpec
from guiapp.merging.methods import get_method
from guiapp.merging.recipe import as_number

KeyPlace = tuple[str | int, ...]


@dataclass(frozen=True)
class Tunable:
    """One number of the recipe the lab may change: where it is, its name (`models[1].weight`, `t[2]`), the
    parameter it belongs to, its value in the recipe and the range searched."""

    name: str
    parameter: str
    path: KeyPlace
    start: float
    low: float
    high: float

    def to_unit(self, value: float) -> float:
        """`value` as a fraction of the range (0 at `low`, 1 at `high`), kept within it."""
        return min(1.0, max(0.0, (value - self.low) / (self.high - self.low)))

    def from_unit(self, fraction: float) -> float:
        """The value at `fraction` of the range, rounded to 6 decimals (what best.yml shows)."""
        return round(self.low + min(1.0, max(0.0, float(fraction))) * (self.high - self.low), 6)


def tunables(document: dict[str, Any], tune: str | None = None) -> list[Tunable]:
    """The numbers of `document` (a recipe mapping) to search: all of them, or those `tune` names.

    `tune` is a comma-separated list of names (`models[0].weight`) or parameter names (`weight`: every weight),
    each optionally with its own range (`t=0.2:0.8`). Raises SettingsError for a name that matches nothing or a
    range that is not two increasing numbers, RecipeError when the recipe has nothing numeric to tune.
    """
    method = get_method(str(document.get("merge_method", "")))
    specs = {spec.name: spec for spec in method.params if spec.kind is ParamKind.FLOAT}
    found = [item for path, value in _parameter_scopes(document) for item in _numbers(path, value, specs)]
    if not found:
        raise RecipeError(
            f"The recipe has no number for the lab to tune: {method.name} has "
            + (f"the numeric parameters {', '.join(sorted(specs))}, and the recipe gives none of them a value."
               if specs else "no numeric parameters."),
            why="The lab searches the numbers a recipe gives (weights, densities, t, epsilon, lambda...) for the "
            "merge your text likes best.",
            hint="Write the parameters to search into the recipe with a starting value, e.g. `weight: 0.5` under "
            "each model's `parameters:`." if specs else "Choose a method with weights, such as linear, ties or slerp.",
            key="parameters",
        )
    if not tune:
        return found
    chosen: list[Tunable] = []
    for item in (part.strip() for part in tune.split(",")):
        if not item:
            continue
        name, _, bounds = item.partition("=")
        matching = [t for t in found if name.strip() in (t.name, t.parameter)]
        if not matching:
            raise SettingsError(f'"{name}" is not a number of this recipe the lab can tune.',
                                hint="Tunable here: " + ", ".join(t.name for t in found) + ".", key="tune")
        for tunable in matching:
            if bounds:
                tunable = _with_range(tunable, bounds, specs[tunable.parameter])
            chosen = [t for t in chosen if t.path != tunable.path] + [tunable]
    return chosen


def with_values(document: dict[str, Any], chosen: list[Tunable], values: dict[str, float]) -> dict[str, Any]:
    """A copy of `document` with each tunable's number replaced by `values[name]` (the others left as written)."""
    result = copy.deepcopy(document)
    for tunable in chosen:
        if tunable.name in values:
            holder = result
            for step in tunable.path[:-1]:
                holder = holder[step]
            holder[tunable.path[-1]] = values[tunable.name]
    return result


def _parameter_scopes(document: Any, path: KeyPlace = ()) -> list[tuple[KeyPlace, dict[str, Any]]]:
    """Every `parameters:` mapping in the recipe (its own, each model's, slice's, source's and module's)."""
    scopes: list[tuple[KeyPlace, dict[str, Any]]] = []
    if isinstance(document, dict):
        for key, value in document.items():
            if key == "parameters" and isinstance(value, dict):
                scopes.append(((*path, key), value))
            elif isinstance(value, (dict, list)):
                scopes += _parameter_scopes(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            scopes += _parameter_scopes(value, (*path, index))
    return scopes


def _numbers(scope_path: KeyPlace, scope: dict[str, Any], specs: dict[str, ParamSpec]) -> list[Tunable]:
    found = []
    owner = _owner_name(scope_path[:-1])
    for parameter, value in scope.items():
        if parameter in specs:
            found += _places(value, (*scope_path, parameter), f"{owner}{parameter}", specs[parameter])
    return found


def _places(value: Any, path: KeyPlace, name: str, spec: ParamSpec) -> list[Tunable]:
    """The tunable numbers in one parameter's value: a number, a gradient's points, filtered entries' values."""
    if isinstance(value, dict):
        label = value.get("filter") or "*"
        return _places(value.get("value"), (*path, "value"), f"{name}[{label}]", spec) if "value" in value else []
    if isinstance(value, list):
        if all(isinstance(entry, dict) for entry in value):
            return [item for index, entry in enumerate(value)
                    for item in _places(entry, (*path, index), name, spec)]
        return [item for index, entry in enumerate(value)
                for item in _places(entry, (*path, index), f"{name}[{index}]", spec)]
    number = as_number(value) if not isinstance(value, bool) else None
    if number is None or not math.isfinite(number):
        return []
    low, high = _range(spec, float(number))
    return [Tunable(name, spec.name, path, float(number), low, high)] if high > low else []


def _range(spec: ParamSpec, value: float) -> tuple[float, float]:
    """The schema's usual range; an open end is taken as 0 below (or twice the recipe's value when that is lower)
    and 1 above (or twice the recipe's value when that is higher), within the hard limits."""
    low, high = spec.span
    low = low if low is not None else min(0.0, 2 * value)
    high = high if high is not None else max(1.0, 2 * value)
    if spec.minimum is not None:
        low = max(low, spec.minimum)
    if spec.maximum is not None:
        high = min(high, spec.maximum)
    return float(low), float(high)


def _with_range(tunable: Tunable, bounds: str, spec: ParamSpec) -> Tunable:
    low_text, _, high_text = bounds.partition(":")
    low, high = as_number(low_text.strip()), as_number(high_text.strip())
    if low is None or high is None or not low < high:
        raise SettingsError(f'The range "{bounds}" of {tunable.name} is not two increasing numbers.',
                            hint=f"Write it as {tunable.name}=LOW:HIGH, e.g. {tunable.name}=0.2:0.8.", key="tune")
    if (spec.minimum is not None and low < spec.minimum) or (spec.maximum is not None and high > spec.maximum):
        raise SettingsError(f"The range {low:g}:{high:g} of {tunable.name} goes beyond what {spec.name} allows "
                            f"({spec.minimum if spec.minimum is not None else '-∞'} to "
                            f"{spec.maximum if spec.maximum is not None else '∞'}).", key="tune")
    return Tunable(tunable.name, tunable.parameter, tunable.path, tunable.start, float(low), float(high))


def _owner_name(path: KeyPlace) -> str:
    """`models[1].`, `slices[0].sources[1].`, or "" for the recipe's own parameters."""
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path).lstrip(".")
    return f"{text}." if text else ""
