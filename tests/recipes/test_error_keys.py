"""Every recipe problem names the recipe key it concerns (the window focuses that control): parse-time problems,
parameter values, token overrides, modules and the methods' own checks; and no RecipeError in the engine is
raised without a key except for the recipe as a whole."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from guiapp.errors import RecipeError
from guiapp.merging.merge import plan_merge
from guiapp.merging.plan import align_vocabulary
from guiapp.merging.recipe import parse_recipe
from tests.recipes.models import SPECIALS, write_model

ROOT = Path(__file__).resolve().parents[2]
MODELS = "models:\n  - model: a/b\n"
TOKENS = "merge_method: linear\ntokenizer:\n  source: base\n  tokens:\n"


@pytest.mark.parametrize(("text", "key"), [
    ("merge_method: linear\nmodules: {default: {models: [{model: a/b}]}}\n" + MODELS, ("modules",)),
    ("merge_method: linear\nmodules: []\n", ("modules",)),
    ("merge_method: linear\nmodules: {default: 3}\n", ("modules", "default")),
    ("merge_method: linear\ntokenizer_source: base\nmodules:\n  text_decoder: {models: [{model: a/b}]}\n"
     "  vision_tower: {models: [{model: a/b}]}\n", ("tokenizer_source",)),
    ("merge_method: linear\ntokenizer: {source: base}\ntokenizer_source: base\n" + MODELS, ("tokenizer",)),
    ("merge_method: linear\ntokenizer: 3\n" + MODELS, ("tokenizer",)),
    ("merge_method: linear\ntokenizer: {source: base, colour: red}\n" + MODELS, ("tokenizer",)),
    ("merge_method: linear\ntokenizer: {source: base, pad_to_multiple_of: 0}\n" + MODELS,
     ("tokenizer", "pad_to_multiple_of")),
    ("merge_method: linear\ntokenizer: {source: base, tokens: [a]}\n" + MODELS, ("tokenizer", "tokens")),
    ("merge_method: linear\ntokenizer_source: 3\n" + MODELS, ("tokenizer_source",)),
    ("merge_method: linear\ntokenizer: {source: 5}\n" + MODELS, ("tokenizer", "source")),
    (TOKENS + "    x: 3\n" + MODELS, ("tokenizer", "tokens", "x")),
    (TOKENS + "    x: {source: a/b, colour: red}\n" + MODELS, ("tokenizer", "tokens", "x")),
    (TOKENS + "    x: {source: a/b, force: maybe}\n" + MODELS, ("tokenizer", "tokens", "x", "force")),
    (TOKENS + "    x: {force: true}\n" + MODELS, ("tokenizer", "tokens", "x")),
    (TOKENS + "    x: {source: 5}\n" + MODELS, ("tokenizer", "tokens", "x", "source")),
    (TOKENS + "    x: {source: {kind: model_token, token: y}}\n" + MODELS, ("tokenizer", "tokens", "x", "source")),
    (TOKENS + "    x: {source: {kind: model_token, model: a/b, token_id: -1}}\n" + MODELS,
     ("tokenizer", "tokens", "x", "source", "token_id")),
    (TOKENS + "    x: {source: {kind: sideways}}\n" + MODELS, ("tokenizer", "tokens", "x", "source", "kind")),
    (TOKENS + "    x: {source: {model: 5}}\n" + MODELS, ("tokenizer", "tokens", "x", "source", "model")),
    ("merge_method: linear\nchat_template: 5\n" + MODELS, ("chat_template",)),
    ("merge_method: linear\nchat_template: chatlm\n" + MODELS, ("chat_template",)),
    ("merge_method: linear\nmodels:\n  - model: 5\n", ("models", 0, "model")),
    ("merge_method: linear\nbase_model: 5\n" + MODELS, ("base_model",)),
    ("merge_method: linear\nslices:\n  - sources: [{model: a/b, layer_range: [0, 1]}]\n    base_model: [1]\n",
     ("slices", 0, "base_model")),
    ("merge_method: linear\nslices:\n  - sources: [{model: [], layer_range: [0, 1]}]\n",
     ("slices", 0, "sources", 0, "model")),
])
def test_a_parse_problem_names_its_key(text, key):
    with pytest.raises(RecipeError) as caught:
        parse_recipe(text)
    assert caught.value.key == key, str(caught.value)


@pytest.mark.parametrize(("parameters", "key"), [
    ("{weight: []}", ("models", 0, "parameters", "weight")),
    ("{weight: [{filter: mlp}]}", ("models", 0, "parameters", "weight")),
    ("{weight: [1, true]}", ("models", 0, "parameters", "weight")),
])
def test_a_bad_parameter_value_names_its_parameter(llama_pair, parameters, key):
    base, one, _ = llama_pair
    with pytest.raises(RecipeError) as caught:
        plan_merge(parse_recipe(f"merge_method: linear\nmodels:\n  - model: {one}\n    parameters: {parameters}\n"))
    assert caught.value.key == key, str(caught.value)


def test_weights_that_cancel_out_name_the_normalising_switch(llama_pair):
    base, one, two = llama_pair
    recipe = parse_recipe(f"merge_method: linear\nmodels:\n  - model: {one}\n    parameters: {{weight: 1}}\n"
                          f"  - model: {two}\n    parameters: {{weight: -1}}\n")
    with pytest.raises(RecipeError) as caught:
        plan_merge(recipe)
    assert caught.value.key == ("parameters", "normalize")


def test_a_module_that_matches_nothing_is_named(llama_pair):
    base, one, _ = llama_pair
    with pytest.raises(RecipeError) as caught:
        plan_merge(parse_recipe(f"merge_method: linear\nparameters: {{weight: 1}}\nmodules:\n  text_decoder: {{models: [{{model: {one}}}]}}\n"
                                f"  audio_tower: {{models: [{{model: {one}}}]}}\n"))
    assert caught.value.key == ("modules", "audio_tower")


@pytest.fixture(scope="module")
def vocabulary_pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    return (write_model(folder / "a", SPECIALS + ["a", "b"], seed=1),
            write_model(folder / "b", SPECIALS + ["a", "c"], seed=2))


@pytest.mark.parametrize(("tokens", "key"), [
    ("zzz: {source: {kind: zero}}", ("tokenizer", "tokens", "zzz")),  # not in the result's vocabulary
    ("a: {source: elsewhere/model}", ("tokenizer", "tokens", "a")),  # not a merged model
    ("b: {source: B}", ("tokenizer", "tokens", "b")),  # a model without the token
    ("b: {source: {kind: model_token, model: A, token: nope}}", ("tokenizer", "tokens", "b")),
    ("b: {source: {kind: model_token, model: A, token_id: 999}}", ("tokenizer", "tokens", "b")),
])
def test_a_token_override_that_cannot_be_had_names_its_token(vocabulary_pair, tokens, key):
    a, b = vocabulary_pair
    tokens = tokens.replace("B", str(b)).replace("A", str(a))
    recipe = parse_recipe(f"merge_method: linear\nparameters: {{weight: 1}}\nbase_model: {a}\ntokenizer:\n  source: base\n  tokens:\n"
                          f"    {tokens}\nmodels:\n  - model: {a}\n  - model: {b}\n")
    plan = plan_merge(recipe)
    with pytest.raises(RecipeError) as caught:
        align_vocabulary(plan, [a, b])
    assert caught.value.key == key, str(caught.value)


# The packages that read, plan and run recipes (a recipe's mistakes are found there).
ENGINE_PACKAGES = ("checkpoints", "compute", "merging", "lora", "inference", "moe", "lab")
# The RecipeErrors that concern no single key: a recipe (or MoE configuration) that is not a mapping at all, and a
# lab candidate whose model would take another shape than the recipe as given.
_WHOLE_RECIPE = {"guiapp/merging/recipe.py": 1, "guiapp/moe/config.py": 1, "guiapp/lab/trial.py": 1}


def test_no_recipe_error_in_the_engine_lacks_a_key():
    missing: dict[str, int] = {}
    engine = [path for package in ENGINE_PACKAGES for path in (ROOT / "guiapp" / package).rglob("*.py")]
    for path in sorted([*engine, ROOT / "guiapp/hub/references.py"]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "RecipeError" \
                    and not any(keyword.arg == "key" for keyword in node.keywords):
                name = str(path.relative_to(ROOT))
                missing[name] = missing.get(name, 0) + 1
    assert missing == _WHOLE_RECIPE
