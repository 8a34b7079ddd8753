"""How the window speaks of an extraction's result: one metric (the share of each module's change the adapter
keeps), one name for it ("change kept"), and one ranking of the modules that keep the least, shared by the report's
text and its chart. No Qt.
"""

from __future__ import annotations

from typing import Any

LEAST_KEPT_SHOWN = 3
WORTH_A_LOOK = 0.995  # a module keeping less of its change than this may be named among those that keep least


def least_kept(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The modules that keep the least of their change, least first (as the engine ranks `worst_modules`): the
    first `LEAST_KEPT_SHOWN` of those below `WORTH_A_LOOK`, or none when the adapter has no more modules than that
    (then none stands out)."""
    modules = [m for m in summary.get("module_energies") or [] if m.get("retained_energy") is not None]
    if len(modules) <= LEAST_KEPT_SHOWN:
        return []
    ranked = sorted(modules, key=lambda m: m["retained_energy"])
    return [m for m in ranked if m["retained_energy"] < WORTH_A_LOOK][:LEAST_KEPT_SHOWN]


def short_module_name(module: str) -> str:
    """"layer 12 v_proj" for model.layers.12.self_attn.v_proj (the module's name when it has no layer)."""
    from guiapp.checkpoints.tensor_roles import split_layer_name  # the engine is loaded once jobs have run

    place = split_layer_name(f"{module}.weight")
    return f"layer {place.index} {module.rpartition('.')[2]}" if place is not None else module


def least_kept_sentence(summary: dict[str, Any]) -> str:
    """"Keeps the least: layer 0 o_proj (60 %), …" for the modules `least_kept` names, or "" for none."""
    modules = least_kept(summary)
    if not modules:
        return ""
    return "Keeps the least of its change: " + ", ".join(
        f"{short_module_name(m['module'])} ({m['retained_energy']:.0%}, rank {m['rank']})" for m in modules) + "."
