"""Which numbers of a recipe the lab tunes, and within which ranges (the methods' schemas)."""

from __future__ import annotations

import pytest

from guiapp.errors import RecipeError, SettingsError
from guiapp.lab.space import tunables, with_values

RECIPE = {
    "merge_method": "della", "base_model": "base",
    "models": [{"model": "a", "parameters": {"weight": 0.6, "density": [0.2, 0.5, 0.8], "epsilon": 0.1}},
               {"model": "b", "parameters": {"weight": 0.4, "density": [{"filter": "mlp", "value": 0.3},
                                                                        {"value": 0.7}], "epsilon": 0.1}}],
    "parameters": {"lambda": 1.0, "normalize": True},
}


def test_every_number_the_recipe_gives_is_tunable_within_its_schema_range():
    found = {t.name: (t.start, t.low, t.high) for t in tunables(RECIPE)}
    assert found == {
        "models[0].weight": (0.6, 0.0, 1.2), "models[0].density[0]": (0.2, 0.0, 1.0),
        "models[0].density[1]": (0.5, 0.0, 1.0), "models[0].density[2]": (0.8, 0.0, 1.0),
        "models[0].epsilon": (0.1, 0.0, 0.5), "models[1].weight": (0.4, 0.0, 1.0),
        "models[1].density[mlp]": (0.3, 0.0, 1.0), "models[1].density[*]": (0.7, 0.0, 1.0),
        "models[1].epsilon": (0.1, 0.0, 0.5), "lambda": (1.0, 0.0, 2.0),
    }  # normalize (true or false) is not a number to search; an open end reaches 1 or twice the value


def test_tune_picks_numbers_by_name_or_parameter_with_their_own_ranges():
    chosen = tunables(RECIPE, "weight, models[0].density[1]=0.3:0.6")
    assert [(t.name, t.low, t.high) for t in chosen] == [
        ("models[0].weight", 0.0, 1.2), ("models[1].weight", 0.0, 1.0), ("models[0].density[1]", 0.3, 0.6)]
    changed = with_values(RECIPE, chosen, {"models[1].weight": 0.9, "models[0].density[1]": 0.45})
    assert changed["models"][1]["parameters"]["weight"] == 0.9
    assert changed["models"][0]["parameters"]["density"] == [0.2, 0.45, 0.8]
    assert RECIPE["models"][0]["parameters"]["density"] == [0.2, 0.5, 0.8]  # the recipe itself is left as it was


def test_names_and_ranges_that_do_not_fit_are_explained():
    with pytest.raises(SettingsError, match='"gamma" is not a number of this recipe'):
        tunables(RECIPE, "gamma")
    with pytest.raises(SettingsError, match="not two increasing numbers"):
        tunables(RECIPE, "models[0].weight=0.8:0.2")
    with pytest.raises(SettingsError, match="goes beyond what density allows"):
        tunables(RECIPE, "models[0].density[0]=-1:0.5")
    with pytest.raises(RecipeError, match="no number for the lab to tune"):
        tunables({"merge_method": "slerp", "base_model": "a", "models": [{"model": "a"}, {"model": "b"}]})


def test_the_window_names_each_number_by_its_model_label_point_and_filter():
    from guiapp.jobs.lab import tunable_words

    document = {"merge_method": "ties", "base_model": "/m/base",
                "models": [{"model": "/m/tiny-math", "parameters": {"weight": [0.2, 0.5, 0.9], "density": 0.6}},
                           {"model": "org/chat@v2", "parameters": {
                               "weight": 0.5, "density": [{"filter": "self_attn", "value": 0.3}, {"value": 0.7}]}}]}
    assert [tunable_words(document, t) for t in tunables(document)] == [
        "tiny-math: Weight, point 1 of 3", "tiny-math: Weight, point 2 of 3", "tiny-math: Weight, point 3 of 3",
        "tiny-math: Keep this fraction of changes", "chat: Weight",
        "chat: Keep this fraction of changes (self_attn)", "chat: Keep this fraction of changes (the rest)"]
    slerp = {"merge_method": "slerp", "base_model": "/m/a", "parameters": {"t": [0.0, 1.0]},
             "slices": [{"sources": [{"model": "/m/a", "layer_range": [0, 2]}, {"model": "/m/b", "layer_range": [0, 2]}]}]}
    assert [tunable_words(slerp, t) for t in tunables(slerp)] == [
        "Position between the models (t), point 1 of 2", "Position between the models (t), point 2 of 2"]
