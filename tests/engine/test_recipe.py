"""Recipe parsing and parameter look-up (docs/spec/merge-methods.md §1), checked against values worked out by hand."""

from __future__ import annotations

import pytest

from guiapp.errors import RecipeError
from guiapp.hub.references import ModelRef
from guiapp.merging.recipe import evaluate, is_missing, layer_position, lookup, parse_recipe


def test_gradient_interpolates_between_anchors():
    # 5 layers, anchors [0, 1, 0.5]: t = 0, .25, .5, .75, 1 → s = 0, .5, 1, 1.5, 2
    values = [evaluate([0.0, 1.0, 0.5], "x", layer_position(i, 5)) for i in range(5)]
    assert values == pytest.approx([0.0, 0.5, 1.0, 0.75, 0.5])
    assert evaluate([0.2, 0.8], "x", layer_position(0, 1)) == pytest.approx(0.8)  # one layer: t = 1


def test_stepped_lists_and_scalars():
    assert [evaluate([True, False], "x", t) for t in (0.0, 0.49, 0.99, 1.0)] == [True, True, True, False]
    assert evaluate(0.3, "anything", 0.7) == 0.3


def test_filters_first_match_wins_and_may_hold_gradients():
    value = [{"filter": "self_attn", "value": [0.0, 1.0]}, {"filter": "mlp", "value": 0.7}, {"value": 0.5}]
    assert evaluate(value, "model.layers.3.self_attn.q_proj.weight", 0.25) == pytest.approx(0.25)
    assert evaluate(value, "model.layers.3.mlp.up_proj.weight", 0.25) == 0.7
    assert evaluate(value, "model.norm.weight", 0.25) == 0.5
    assert is_missing(evaluate({"filter": "mlp", "value": 1}, "model.norm.weight", 0.0))


def test_lookup_falls_through_to_the_next_scope():
    source, slice_, top = {"weight": {"filter": "mlp", "value": 2.0}}, {}, {"weight": 1.0}
    assert lookup([source, slice_, top], "weight", "layers.0.mlp.up.weight", 0) == 2.0
    assert lookup([source, slice_, top], "weight", "layers.0.self_attn.q.weight", 0) == 1.0
    assert is_missing(lookup([source, slice_, top], "density", "x", 0))


def test_model_references():
    assert ModelRef.parse("org/name") == ModelRef("org/name")
    assert ModelRef.parse("org/name@v2") == ModelRef("org/name", "v2")
    assert ModelRef.parse("org/name+org/adapter") == ModelRef("org/name", None, ModelRef("org/adapter"))
    assert ModelRef.parse("org/name").hub_id == "org/name"
    assert ModelRef.parse("./local/folder").hub_id is None


def test_form_errors_are_named():
    with pytest.raises(RecipeError, match="exactly one of `models:` or `slices:`"):
        parse_recipe("merge_method: linear\n")
    with pytest.raises(RecipeError, match="no merge_method"):
        parse_recipe("models:\n  - model: a/b\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        parse_recipe("merge_method: linear\nmodels: [\n")
    with pytest.raises(RecipeError, match="layer_range"):
        parse_recipe("merge_method: passthrough\nslices:\n  - sources:\n      - model: a/b\n        layer_range: [4, 2]\n")
    with pytest.raises(RecipeError, match='"vocab" in tokenizer is not a tokenizer setting'):
        parse_recipe("merge_method: linear\ntokenizer: {source: union, vocab: 3}\nmodels:\n  - model: a/b\n")
    with pytest.raises(RecipeError, match="`dtype: int4` is not a dtype"):
        parse_recipe("merge_method: linear\ndtype: int4\nmodels:\n  - model: a/b\n")


def test_yaml_tags_that_construct_objects_are_refused(tmp_path):
    marker = tmp_path / "ran"
    hostile = f"merge_method: !!python/object/apply:os.system ['touch {marker}']\nmodels:\n  - model: a/b\n"
    with pytest.raises(RecipeError, match="not valid YAML"):
        parse_recipe(hostile)
    assert not marker.exists()


def test_unknown_keys_warn_with_a_suggestion():
    recipe = parse_recipe("merge_method: linear\nbase_modle: a/b\nmodels:\n  - model: a/b\n")
    assert any('"base_modle"' in w and "base_model" in w for w in recipe.warnings)
