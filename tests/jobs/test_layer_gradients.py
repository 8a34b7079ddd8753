"""A parameter's value across the layers, as the gradient picture draws it: the engine's own interpolation."""

from __future__ import annotations

import pytest

from guiapp.errors import RecipeError
from guiapp.jobs.layer_gradients import gradient_curves, with_anchor
from guiapp.merging.recipe import evaluate, layer_position


def test_a_list_is_one_curve_with_the_value_the_merge_uses_at_each_layer():
    [curve] = gradient_curves([0.0, 1.0, 0.5], 6)
    assert curve.anchors == (0.0, 1.0, 0.5) and curve.entry is None
    assert curve.layer_values == tuple(evaluate([0.0, 1.0, 0.5], "x", layer_position(i, 6)) for i in range(6))
    assert [curve.anchor_position(i) for i in range(3)] == [0.0, 0.5, 1.0]


def test_filters_give_one_curve_each_and_unknown_layers_give_anchors_only():
    value = [{"filter": "self_attn", "value": [0, 1]}, {"filter": "mlp", "value": "1e-1"}, {"value": True}]
    curves = gradient_curves(value, None)
    assert [(c.label, c.entry, c.anchors, c.layer_values) for c in curves] == [
        ("self_attn", 0, (0.0, 1.0), ()), ("mlp", 1, (0.1,), ())]  # a boolean entry has no curve


def test_moving_a_point_changes_only_that_number():
    value = [{"filter": "self_attn", "value": [0, 1]}, {"value": 0.5}]
    assert with_anchor(value, 0, 1, 0.42345) == [{"filter": "self_attn", "value": [0, 0.423]}, {"value": 0.5}]
    assert with_anchor(value, 1, 0, 0.2) == [{"filter": "self_attn", "value": [0, 1]}, {"value": 0.2}]
    assert with_anchor([0.1, 0.2], None, 0, 0.9) == [0.9, 0.2]
    assert value == [{"filter": "self_attn", "value": [0, 1]}, {"value": 0.5}]  # the original is left alone
    with pytest.raises(RecipeError):
        with_anchor([0.1, 0.2], None, 5, 0.9)


def test_a_plain_gradient_is_said_in_words_and_anything_else_is_not():
    from guiapp.jobs.layer_gradients import gradient_in_words

    assert gradient_in_words([0.8, 0.8]) == "0.8 at the first layer → 0.8 at the last"
    assert gradient_in_words([0.1, 0.5, 1]) == "0.1 → 0.5 → 1, from the first layer to the last"
    assert gradient_in_words([{"filter": "mlp", "value": 0.5}, {"value": 0.3}]) is None
    assert gradient_in_words([0.1, "x"]) is None and gradient_in_words([True, False]) is None
