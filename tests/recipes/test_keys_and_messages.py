"""No key is ignored in silence: unknown keys and parameters warn with the closest name, keys that cannot be
applied are refused, and every refusal says why in its own words."""

from __future__ import annotations

import pytest

from guiapp.errors import RecipeError
from guiapp.merging.merge import MergeSettings, plan_merge, run_merge
from guiapp.merging.recipe import parse_recipe
from tests.engine.helpers import load_folder


def test_parameter_typo_gets_did_you_mean(llama_pair):
    base, one, two = llama_pair
    plan = plan_merge(parse_recipe(
        f"merge_method: ties\nbase_model: {base}\nparameters:\n  nomalize: true\n"
        f"models:\n  - model: {one}\n    parameters: {{weight: 1, densty: 0.5}}\n"
    ))
    assert any("`nomalize`" in w and 'did you mean "normalize"' in w for w in plan.warnings)
    assert any("`densty`" in w and 'did you mean "density"' in w for w in plan.warnings)
    # Another method's parameter keeps its own message.
    plan = plan_merge(parse_recipe(f"merge_method: linear\nparameters: {{density: 0.5}}\nmodels:\n  - model: {one}\n"
                                   f"    parameters: {{weight: 1}}\n"))
    assert any(w == "`density` (the recipe's parameters) has no effect with linear." for w in plan.warnings)


@pytest.mark.parametrize("text, where, guess", [
    ("merge_method: linear\nmodels:\n  - model: a/b\n    paramters: {weight: 1}\n", "models[0]", "parameters"),
    ("merge_method: passthrough\nslices:\n  - sources:\n      - model: a/b\n        layer_rnage: [0, 1]\n",
     "slices[0].sources[0]", "layer_range"),
    ("merge_method: passthrough\nslices:\n  - sources: [{model: a/b, layer_range: [0, 1]}]\n    paramters: {}\n",
     "slices[0]", "parameters"),
])
def test_unknown_nested_keys_warn_with_a_suggestion(text, where, guess):
    warnings = parse_recipe(text).warnings
    assert any(f"in {where}" in w and f'did you mean "{guess}"' in w for w in warnings), warnings


def test_refusals_say_why_specifically():
    whys = set()
    for text in (
        "models:\n  - model: a/b\n",
        "merge_method: linear\n",
        "merge_method: linear\ndtype: int4\nmodels:\n  - model: a/b\n",
        "merge_method: linear\nchat_template: chatlm\nmodels:\n  - model: a/b\n",
        "merge_method: linear\ntokenizer: {source: union}\ntokenizer_source: base\nmodels:\n  - model: a/b\n",
    ):
        with pytest.raises(RecipeError) as caught:
            parse_recipe(text)
        assert caught.value.why, str(caught.value)
        whys.add(caught.value.why)
    assert len(whys) == 5  # one reason per problem, not one sentence for all
    with pytest.raises(RecipeError, match='did you mean "chatml"'):
        parse_recipe("merge_method: linear\nchat_template: chatlm\nmodels:\n  - model: a/b\n")


def test_epsilon_refusal_states_the_rule_and_a_fix(llama_pair):
    base, one, two = llama_pair
    recipe = parse_recipe(f"merge_method: della\nbase_model: {base}\nmodels:\n  - model: {one}\n"
                          f"    parameters: {{weight: 1, density: 0.5, epsilon: 0.7}}\n")
    with pytest.raises(RecipeError) as caught:
        plan_merge(recipe)
    assert "density − epsilon > 0 and density + epsilon < 1" in caught.value.why
    assert caught.value.hint.startswith("Set `epsilon` to a value between 0 and 0.5")


def test_default_module_form_runs_like_slices(llama_pair, tmp_path):
    base, one, two = llama_pair
    body = (f"    - sources:\n        - model: {one}\n          layer_range: [0, 2]\n"
            f"        - model: {two}\n          layer_range: [0, 2]\n")
    slices = "merge_method: linear\nparameters: {weight: 1.0}\nslices:\n" + body.replace("    ", "  ", 1).replace("\n    ", "\n  ")
    modules = "merge_method: linear\nmodules:\n  default:\n    parameters: {weight: 1.0}\n    slices:\n" + "  " + body.replace("\n    ", "\n      ")
    expected = load_folder(run_merge(parse_recipe(slices), MergeSettings(tmp_path / "a")).output)
    result = load_folder(run_merge(parse_recipe(modules), MergeSettings(tmp_path / "b")).output)
    assert expected.keys() == result.keys()
    assert all(expected[k].equal(result[k]) for k in expected)


def test_module_parameters_fall_through_to_the_recipe_s():
    recipe = parse_recipe("merge_method: linear\nparameters: {weight: 0.25}\nmodules:\n  default:\n"
                          "    parameters: {weight: {filter: mlp, value: 0.75}}\n    models:\n      - model: a/b\n")
    from guiapp.merging.recipe import lookup
    assert lookup([recipe.parameters], "weight", "layers.0.mlp.up_proj.weight", 0) == 0.75
    assert lookup([recipe.parameters], "weight", "layers.0.self_attn.q_proj.weight", 0) == 0.25


def test_multi_module_tokenizer_refusal_and_text_only_wording():
    with pytest.raises(RecipeError, match="several modules") as caught:
        parse_recipe("merge_method: linear\ntokenizer_source: base\nmodules:\n  text_decoder: {models: [{model: a/b}]}\n"
                     "  vision_tower: {models: [{model: a/b}]}\n")
    assert caught.value.why and caught.value.hint
    # A text-only recipe never hears about vision-language models.
    recipe = parse_recipe("merge_method: linear\nmodules:\n  default: {models: [{model: a/b}]}\n")
    assert recipe.models is not None and not any("vision" in w for w in recipe.warnings)
