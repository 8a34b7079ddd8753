"""The checks made before a job: structured problems keyed to the recipe key or setting, never an exception."""

from __future__ import annotations

import dataclasses

import pytest

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.jobs.validation import Severity, check_adapter, check_merge, check_pair, free_output

SMALL = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=256)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("validation-models")
    base = write_llama(root / "base", SMALL, seed=0)
    return {"base": base, "a": write_llama_finetune(root / "a", base, seed=1),
            "b": write_llama_finetune(root / "b", base, seed=2),
            "wider": write_llama(root / "wider", dataclasses.replace(SMALL, intermediate=192), seed=3)}


def linear(*paths, weights=(0.5, 0.5)) -> dict:
    return {"merge_method": "linear",
            "models": [{"model": str(p), "parameters": {"weight": w}} for p, w in zip(paths, weights)]}


def test_a_valid_recipe_is_compatible_with_its_size(models, tmp_path):
    check = check_merge(linear(models["a"], models["b"]), "cpu", str(tmp_path / "out"), None)
    assert check.ready and check.compatible and not check.problems
    assert check.models == 2 and check.tensors > 0 and check.output_bytes > 0


def test_a_parameter_problem_is_keyed_to_that_models_parameter(models, tmp_path):
    document = linear(models["a"], models["b"], weights=(0.5, "heavy"))
    check = check_merge(document, "cpu", str(tmp_path / "out"), None)
    assert not check.ready and check.compatible is None  # the verdict was never reached
    [problem] = check.errors
    assert problem.key == ("models", 1, "parameters", "weight")
    assert "heavy" in problem.message


def test_a_global_parameter_problem_is_keyed_to_the_recipes_parameters(models, tmp_path):
    document = {"merge_method": "karcher", "parameters": {"tol": -1.7},
                "models": [{"model": str(models["a"])}, {"model": str(models["b"])}]}
    [problem] = check_merge(document, "cpu", str(tmp_path / "out"), None).errors
    assert problem.key == ("parameters", "tol") and "-1.7" in problem.message


def test_models_that_do_not_fit_together_are_not_compatible(models, tmp_path):
    check = check_merge(linear(models["a"], models["wider"]), "cpu", str(tmp_path / "out"), None)
    assert check.compatible is False
    [problem] = check.errors
    assert problem.key == ("models",) and problem.severity is Severity.ERROR


def test_an_existing_output_blocks_the_run_with_a_free_name_unless_replacing_is_allowed(models, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    check = check_merge(linear(models["a"], models["b"]), "cpu", str(taken), None)
    [problem] = check.errors
    assert problem.key == ("output",) and "already exists" in problem.message
    assert problem.error.remedy.changes == {"output": str(tmp_path / "taken-2")}
    assert check_merge(linear(models["a"], models["b"]), "cpu", str(taken), None, replace=True).ready
    check = check_merge(linear(models["a"], models["b"]), "cpu", "", None)
    assert [p.key for p in check.errors] == [("output",)]


def test_pair_check_applies_the_output_rule_before_the_job_would(models, tmp_path):
    taken = tmp_path / "lora"
    taken.mkdir()
    check = check_pair(str(models["base"]), str(models["a"]), "cpu", str(taken), None)
    [problem] = check.errors
    assert check.compatible and problem.key == ("output",) and "already exists" in problem.message
    assert free_output(problem.error) == (str(tmp_path / "lora-2"), "Use a new name: lora-2")
    assert check_pair(str(models["base"]), str(models["a"]), "cpu", str(taken), None, replace=True).ready
    inside = check_pair(str(models["base"]), str(models["a"]), "cpu", str(models["a"] / "lora"), None, replace=True)
    assert [p.key for p in inside.errors] == [("output",)]
    # Inside an input model: a free folder beside the models, named as chosen.
    assert free_output(inside.errors[0].error, str(models["a"] / "lora")) == (
        str(models["a"].parent / "lora"), f"Use {models['a'].parent.name}/lora, beside the models")


def test_pair_check_says_which_input_is_at_fault(models, tmp_path):
    good = check_pair(str(models["base"]), str(models["a"]), "cpu", str(tmp_path / "lora"), None)
    assert good.ready and good.matrices > 0 and good.read_bytes > 0
    mismatched = check_pair(str(models["base"]), str(models["wider"]), "cpu", str(tmp_path / "lora"), None)
    assert mismatched.compatible is False and [p.key for p in mismatched.errors] == [("model",)]
    missing = check_pair(str(tmp_path / "no-such-base"), str(models["a"]), "cpu", str(tmp_path / "lora"), None)
    assert [p.key for p in missing.errors] == [("base",)]


def test_adapter_check_of_a_folder_that_is_no_adapter_is_keyed_to_the_adapter(models, tmp_path):
    check = check_adapter(str(models["base"]), str(tmp_path), "cpu", str(tmp_path / "out"))
    assert [p.key for p in check.errors] == [("adapter",)]
