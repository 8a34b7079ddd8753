"""Input-count rules shared by the methods that take a fixed number of models (MergeMethod.check_inputs).

Messages end with what was found and without a full stop: the validator appends where (" in slice 2") and ".".
"""

from __future__ import annotations

from collections.abc import Callable

InputRule = Callable[[int, bool], "str | None"]


def _models(count: int) -> str:
    return f"{count} model" + ("" if count == 1 else "s")


def base_and_one_model(title: str) -> InputRule:
    """The rule for methods that blend a base_model with exactly one other model (slerp, nearswap…)."""

    def check(n_non_base: int, has_base: bool) -> str | None:
        if has_base and n_non_base == 1:
            return None
        found = f"{_models(n_non_base)} besides the base" if has_base else "no base_model"
        return (
            f"{title} blends exactly two models, a base_model and one other model (to combine more, use ties, "
            f"dare_ties or multislerp), but the recipe has {found}"
        )

    return check
