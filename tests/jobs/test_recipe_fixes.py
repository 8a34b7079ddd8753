"""One-click fixes for recipe problems (guiapp/jobs/recipe_fixes.py): each fix, applied to the document, makes the
value the method accepts, as one undo step; a problem whose fix is the user's choice has none."""

from __future__ import annotations

from guiapp.jobs.recipe_document import RecipeDocument
from guiapp.jobs.recipe_fixes import fix_for, suggested_value
from guiapp.merging.methods import METHODS


def _applied(fix, document):
    recipe = RecipeDocument(document)
    fix.apply(recipe)
    fixed = recipe.data
    assert recipe.undo() and recipe.data == document  # one step back to where it was
    return fixed


def test_suggested_values_are_defaults_or_the_middle_of_a_range_or_one():
    assert suggested_value(METHODS["slerp"].param("t")) == 0.5
    assert suggested_value(METHODS["linear"].param("weight")) == 1.0
    assert suggested_value(METHODS["ties"].param("density")) == METHODS["ties"].param("density").default
    # NearSwap's t has neither a default nor an upper end; 1 (as for a weight) would swap in every difference up to 1,
    # nearly the whole other model. Offered: the threshold its authors published (QuartetAnemoi-70B-t0.0001).
    assert suggested_value(METHODS["nearswap"].param("t")) == 0.0001


def test_a_missing_or_out_of_range_value_is_set():
    document = {"merge_method": "ties", "base_model": "b", "parameters": {"lambda": 1},
                "models": [{"model": "org/x", "parameters": {"weight": 1, "density": -3}}, {"model": "org/y"}]}
    fix = fix_for(("models", 0, "parameters", "density"), document, METHODS["ties"])
    assert fix.label == "Set Keep this fraction of changes to 0 for x"
    assert _applied(fix, document)["models"][0]["parameters"]["density"] == 0.0
    fix = fix_for(("models", 1, "parameters", "weight"), document, METHODS["ties"])
    assert _applied(fix, document)["models"][1]["parameters"] == {"weight": 1.0}
    slerp = {"merge_method": "slerp", "base_model": "b", "models": [{"model": "b"}, {"model": "c"}]}
    assert _applied(fix_for(("parameters", "t"), slerp, METHODS["slerp"]), slerp)["parameters"] == {"t": 0.5}


def test_linear_gives_the_base_a_row_and_a_weight():
    document = {"merge_method": "linear", "base_model": "org/base",
                "models": [{"model": "org/x", "parameters": {"weight": 1}}]}
    fix = fix_for(("models", 1, "parameters", "weight"), document, METHODS["linear"])
    assert fix.label == "Add the base (base) with Weight 1"
    assert _applied(fix, document)["models"][-1] == {"model": "org/base", "parameters": {"weight": 1.0}}


def test_dtypes_are_removed_and_choices_are_left_to_the_user():
    document = {"merge_method": "linear", "dtype": "int4", "out_dtype": "int8", "models": []}
    assert "dtype" not in _applied(fix_for(("dtype",), document, METHODS["linear"]), document)
    assert "out_dtype" not in _applied(fix_for(("out_dtype",), document, METHODS["linear"]), document)
    gradient = {"merge_method": "ties", "models": [{"model": "x", "parameters": {"density": [0.2, 3]}}]}
    assert fix_for(("models", 0, "parameters", "density"), gradient, METHODS["ties"]) is None  # the user's list
    assert fix_for(("base_model",), {"merge_method": "ties"}, METHODS["ties"]) is None  # which base: the user's
