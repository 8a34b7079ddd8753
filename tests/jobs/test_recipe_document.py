"""The recipe document the Merge page edits: form ↔ YAML, kept keys, modules, undo — without a window."""

from __future__ import annotations

import pytest
import yaml

from guiapp.errors import RecipeError
from guiapp.jobs.recipe_document import FormModel, FormValues, RecipeDocument, parse_slices


def linear(*models: str) -> dict:
    return {"merge_method": "linear", "models": [{"model": m, "parameters": {"weight": 0.5}} for m in models]}


def test_setting_a_parameter_shows_in_the_yaml_and_undo_takes_it_back():
    document = RecipeDocument(linear("a/one", "a/two"))
    document.set_parameter("weight", 0.25, model=1)
    assert yaml.safe_load(document.yaml())["models"][1]["parameters"] == {"weight": 0.25}
    document.set_parameter("normalize", True)
    assert document.data["parameters"] == {"normalize": True}
    assert document.undo() and "parameters" not in document.data
    assert document.undo() and document.data == linear("a/one", "a/two")
    assert not document.undo()
    assert document.redo() and document.data["models"][1]["parameters"] == {"weight": 0.25}


def test_adding_and_removing_models():
    document = RecipeDocument({"merge_method": "ties", "base_model": "org/base"})
    assert not document.has_inputs()
    assert document.add_model("org/a", {"weight": 1.0}) == 0
    assert document.add_model("org/b") == 1
    assert [row.model for row in document.models()] == ["org/a", "org/b"]
    document.apply_form(FormValues("ties", "org/base", [FormModel("org/b")]))  # the form's row of org/a removed
    assert document.models() == [FormModel("org/b")]


def test_changing_method_and_base_is_one_undo_step_each_and_no_change_is_none():
    document = RecipeDocument(linear("a/one"))
    document.set_method("ties")
    document.set_base("org/base")
    document.set_base("org/base")  # no change: no undo step
    assert document.data["merge_method"] == "ties" and document.data["base_model"] == "org/base"
    document.set_base(None)
    assert "base_model" not in document.data
    assert document.undo() and document.data["base_model"] == "org/base"
    assert document.undo() and "base_model" not in document.data
    assert document.undo() and document.data["merge_method"] == "linear"


def test_yaml_text_replaces_the_document_and_bad_yaml_leaves_it_and_names_the_key():
    document = RecipeDocument(linear("a/one"))
    warnings = document.parse_yaml("merge_method: slerp\nbase_model: a/one\nmodels:\n  - model: a/one\n"
                                   "  - model: a/two\nparameters:\n  t: 0.5\nunknwon: 1\n")
    assert document.data["merge_method"] == "slerp" and document.data["parameters"] == {"t": 0.5}
    assert any("unknwon" in warning for warning in warnings)
    before = document.copy()
    with pytest.raises(RecipeError, match="not valid YAML"):
        document.parse_yaml("models: [unclosed")
    with pytest.raises(RecipeError) as caught:
        document.parse_yaml("merge_method: linear\nmodels: []\n")
    assert caught.value.key == ("models",)
    assert document.data == before


def test_the_form_keeps_keys_it_has_no_field_for():
    document = RecipeDocument({**linear("a/one"), "dtype": "float16", "tokenizer": {"pad_to_multiple_of": 8}})
    document.apply_form(FormValues("linear", models=[FormModel("a/one", {"weight": 1.0}), FormModel("a/two")],
                                   out_dtype="bfloat16", chat_template="chatml"))
    assert document.data == {"merge_method": "linear",
                             "models": [{"model": "a/one", "parameters": {"weight": 1.0}}, {"model": "a/two"}],
                             "out_dtype": "bfloat16", "chat_template": "chatml", "dtype": "float16",
                             "tokenizer": {"pad_to_multiple_of": 8}}
    assert document.undo() and document.data == {**linear("a/one"), "dtype": "float16",
                                                  "tokenizer": {"pad_to_multiple_of": 8}}


def test_the_form_keeps_models_listed_under_modules():
    modules = {"text_decoder": {"models": [{"model": "a/one"}, {"model": "a/two"}]}}
    document = RecipeDocument({"merge_method": "linear", "modules": modules})
    document.apply_form(FormValues("linear", parameters={"normalize": True}))
    assert document.data["modules"] == modules and "models" not in document.data
    assert document.data["parameters"] == {"normalize": True}


def test_an_out_dtype_the_device_cannot_use_is_kept_so_its_problem_stays_visible():
    document = RecipeDocument({**linear("a/one"), "out_dtype": "float64"})
    document.apply_form(FormValues("linear", models=document.models(), keep_out_dtype=True))
    assert document.data["out_dtype"] == "float64"
    document.apply_form(FormValues("linear", models=document.models()))
    assert "out_dtype" not in document.data


def test_slices_text():
    assert parse_slices("  ") is None
    assert parse_slices("- sources: [{model: a, layer_range: [0, 2]}]") == [
        {"sources": [{"model": "a", "layer_range": [0, 2]}]}]
    assert parse_slices("- sources: [unclosed") == "- sources: [unclosed"  # reported by the check, not here
