"""Recipe values as the window's text boxes show them, and back: a per-layer list on one line, the `slices:`
value as the recipe writes it. The text is YAML, read with the same size limits as a recipe."""

from __future__ import annotations

from typing import Any

import yaml

from guiapp.errors import MergesmithError, RecipeError
from guiapp.system.bounded import parse_yaml_bounded

ONE_LINE = 1 << 30  # YAML line width for a one-line value (PyYAML wraps at 80 columns otherwise)


def value_text(value: Any) -> str:
    """A parameter's list value (a gradient, or `{filter, value}` entries) on one line: `[0.2, 0.5, 0.8]`.
    Never raises for values a recipe holds."""
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=ONE_LINE).strip()


def value_from_text(text: str) -> Any:
    """The value typed in a parameter's list box; the text itself when it is not YAML or too large, so that the
    recipe's check reports the bad value next to its model. Never raises."""
    try:
        return parse_yaml_bounded(text or "null", "The value", RecipeError)
    except MergesmithError:
        return text


def slices_text(slices: Any) -> str:
    """The `slices:` value as the slices box shows it (layer ranges on one line, as mergekit's examples write
    them); empty for no slices. Never raises for values a recipe holds."""
    return yaml.safe_dump(slices, sort_keys=False, default_flow_style=None).strip() if slices else ""
