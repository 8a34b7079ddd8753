"""Numbers that YAML 1.1 reads as strings (`1e-5`: no dot before the exponent) are numbers wherever one is expected."""

from __future__ import annotations

import pytest
import yaml

from guiapp.errors import RecipeError
from guiapp.merging.merge import plan_merge
from guiapp.merging.recipe import evaluate, parse_recipe


def test_yaml_reads_exponents_without_a_dot_as_strings():
    # The premise of this file: if PyYAML ever reads these as floats, the tests below prove nothing.
    assert yaml.safe_load("tol: 1e-5\neps: 1e-8") == {"tol": "1e-5", "eps": "1e-8"}


def test_method_wide_and_per_model_numbers_written_as_exponents(llama_pair):
    base, one, two = llama_pair
    recipe = parse_recipe(
        f"merge_method: karcher\nparameters:\n  tol: 1e-5\n  max_iter: 2e1\n"
        f"models:\n  - model: {one}\n  - model: {two}\n"
    )
    task = plan_merge(recipe).tasks[0]
    assert task.params["tol"] == pytest.approx(1e-5) and isinstance(task.params["tol"], float)
    assert task.params["max_iter"] == 20 and isinstance(task.params["max_iter"], int)

    recipe = parse_recipe(
        f"merge_method: multislerp\nparameters:\n  eps: 1e-8\n"
        f"models:\n  - model: {one}\n    parameters:\n      weight: 5e-1\n"
        f"  - model: {two}\n    parameters:\n      weight: [1e-1, 9e-1]\n"
    )
    tasks = plan_merge(recipe).tasks
    assert tasks[0].params["eps"] == pytest.approx(1e-8)
    assert tasks[0].model_params[0]["weight"] == pytest.approx(0.5)
    # A gradient of strings is still a gradient: interpolated, not stepped (2 layers: t = 0 and t = 1).
    layer_weights = [t.model_params[1]["weight"] for t in tasks if ".layers." in t.name]
    assert min(layer_weights) == pytest.approx(0.1) and max(layer_weights) == pytest.approx(0.9)


def test_gradient_of_numeric_strings_interpolates():
    assert evaluate(["1e-1", "3e-1"], "x", 0.5) == pytest.approx(0.2)


def test_text_that_is_not_a_number_is_still_refused(llama_pair):
    base, one, two = llama_pair
    recipe = parse_recipe(
        f"merge_method: karcher\nparameters:\n  tol: small\nmodels:\n  - model: {one}\n  - model: {two}\n"
    )
    with pytest.raises(RecipeError, match="`tol` must be a number, got 'small'"):
        plan_merge(recipe)


@pytest.mark.parametrize("written", [".nan", ".inf", "-.inf", "1e309", "[0.5, .nan]"])
def test_not_a_number_and_infinity_are_refused_before_the_merge(llama_pair, written):
    """A NaN or infinite weight would only show as a broken model (or a NaN stop mid-merge): refuse it when checked."""
    base, one, two = llama_pair
    recipe = parse_recipe(
        f"merge_method: linear\nmodels:\n  - model: {one}\n    parameters:\n      weight: {written}\n"
        f"  - model: {two}\n    parameters:\n      weight: 0.5\n"
    )
    with pytest.raises(RecipeError, match="(`weight` of .* must be a number|is not a number a parameter can take)") \
            as raised:
        plan_merge(recipe)
    assert raised.value.key[-2:] == ("parameters", "weight")
