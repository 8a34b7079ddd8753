"""The registry and the schemas the window and the validator read."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from guiapp.errors import RecipeError
from guiapp.merging.method_declarations import DECLARATIONS
from guiapp.merging.method_schema import BaseRole, MethodDeclaration, ParamKind
from guiapp.merging.methods import METHODS, get_method
from guiapp.merging.methods.base import LoneTensorPolicy

ALL_METHODS = {
    "linear", "task_arithmetic", "ties", "dare_ties", "dare_linear", "breadcrumbs", "breadcrumbs_ties", "della",
    "della_linear", "slerp", "nuslerp", "multislerp", "karcher", "model_stock", "sce", "ram", "ramplus_tl",
    "nearswap", "arcee_fusion", "passthrough",
}  # fmt: skip


def test_registry_holds_exactly_the_twenty_methods():
    assert set(METHODS) == ALL_METHODS
    assert all(method.name == name for name, method in METHODS.items())


def test_each_method_is_its_declaration_with_a_merge_function_and_the_declarations_need_no_torch():
    # The window builds the Merge page from the declarations while torch loads: they must be the methods' own.
    assert list(DECLARATIONS) == list(METHODS)
    for name, declaration in DECLARATIONS.items():
        declared = {f.name: getattr(METHODS[name], f.name) for f in dataclasses.fields(MethodDeclaration)}
        assert MethodDeclaration(**declared) == declaration, name
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; import guiapp.merging.method_declarations; "
         "print(sorted(m for m in ('torch', 'numpy', 'guiapp.merging.methods') if m in sys.modules))"],
        capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == ["[]"], loaded.stdout + loaded.stderr


def test_unknown_method_suggests_the_closest_name():
    with pytest.raises(RecipeError) as caught:
        get_method("dare_tie")
    assert 'Did you mean "dare_ties"?' in str(caught.value)
    assert "task_arithmetic" in caught.value.hint


@pytest.mark.parametrize(("written", "meant"), [("LINEAR", "linear"), ("Task-Arithmetic", "task_arithmetic")])
def test_a_method_written_in_capitals_or_with_dashes_gets_its_name_suggested(written, meant):
    with pytest.raises(RecipeError) as caught:
        get_method(written)
    assert f'Did you mean "{meant}"?' in str(caught.value)


@pytest.mark.parametrize("name", sorted(ALL_METHODS))
def test_every_method_describes_itself_and_its_params(name):
    method = get_method(name)
    assert method.title and method.summary and "\n" not in method.summary
    assert method.paper is None or method.paper.startswith("https://")
    for spec in method.params:
        assert spec.help and "\n" not in spec.help, spec.name
        assert spec.required or spec.default is not None, spec.name
        if spec.minimum is not None and spec.maximum is not None:
            assert spec.minimum <= spec.maximum
        if not spec.required and spec.minimum is not None:
            assert spec.default >= spec.minimum, spec.name
        if not spec.required and spec.maximum is not None:
            assert spec.default <= spec.maximum, spec.name


# docs/spec/merge-methods.md §2's table: per-model params (required or default) and method-wide defaults.
TASK_VECTOR_TABLE = {
    "task_arithmetic": ({}, dict(normalize=False)),
    "ties": ({"density": 1.0}, dict(normalize=True, rescale=False)),
    "dare_ties": ({"density": 1.0}, dict(normalize=False, rescale=True)),
    "dare_linear": ({"density": 1.0}, dict(normalize=False, rescale=True)),
    "breadcrumbs": ({"density": 1.0, "gamma": 0.01}, dict(normalize=False, rescale=False)),
    "breadcrumbs_ties": ({"density": 1.0, "gamma": 0.01}, dict(normalize=False, rescale=False)),
    "della": ({"density": 1.0, "epsilon": 0.15}, dict(normalize=True, rescale=True)),
    "della_linear": ({"density": 1.0, "epsilon": 0.15}, dict(normalize=False, rescale=True)),
}


@pytest.mark.parametrize("name", sorted(TASK_VECTOR_TABLE))
def test_task_vector_schemas_follow_the_spec_table(name):
    method = get_method(name)
    per_model, defaults = TASK_VECTOR_TABLE[name]
    assert method.base_role is BaseRole.REQUIRED
    weight = method.param("weight")
    assert weight.per_model and weight.required and weight.minimum is None  # negative weights are legitimate
    assert {p.name: p.default for p in method.per_model_params if p.name != "weight"} == per_model
    globals_ = {p.name: p.default for p in method.global_params}
    assert globals_ == {**defaults, "lambda": 1.0, "int8_mask": False}
    if "density" in per_model:
        # above 1 mergekit keeps every change, as 1 does: usual 0–1, refused only below 0
        density = method.param("density")
        assert (density.minimum, density.maximum, density.usual) == (0.0, None, (0.0, 1.0))


@pytest.mark.parametrize(
    "name, per_model, method_wide",
    [
        ("linear", {"weight"}, {"normalize"}),
        ("slerp", set(), {"t"}),
        ("nuslerp", {"weight"}, {"nuslerp_flatten", "nuslerp_row_wise"}),
        ("multislerp", {"weight"}, {"normalize_weights", "eps"}),
        ("karcher", set(), {"max_iter", "tol"}),
        ("model_stock", set(), {"filter_wise"}),
        ("sce", set(), {"select_topk", "int8_mask"}),
        ("ram", set(), {"epsilon"}),
        ("ramplus_tl", set(), {"epsilon", "r", "alpha"}),
        ("nearswap", set(), {"t"}),
        ("arcee_fusion", set(), set()),
        ("passthrough", {"scale"}, set()),
    ],
)
def test_other_schemas_split_per_model_and_method_wide_params(name, per_model, method_wide):
    method = get_method(name)
    assert {p.name for p in method.per_model_params} == per_model
    assert {p.name for p in method.global_params} == method_wide


def test_defaults_of_the_other_methods():
    assert get_method("karcher").param("max_iter").kind is ParamKind.INT
    assert get_method("karcher").param("max_iter").default == 10
    assert get_method("karcher").param("tol").default == 1e-5
    assert get_method("multislerp").param("eps").default == 1e-8
    assert get_method("nuslerp").param("nuslerp_flatten").default is True
    assert get_method("nuslerp").param("nuslerp_row_wise").default is False
    assert get_method("sce").param("select_topk").default == 1.0
    assert get_method("ramplus_tl").param("r").default == 0.1
    assert get_method("ramplus_tl").param("alpha").default == 0.2
    assert get_method("ram").param("epsilon").default == 1e-5
    assert get_method("slerp").param("t").required and get_method("nearswap").param("t").required
    assert get_method("passthrough").param("scale").default == 1.0


def test_lone_tensor_policies_and_base_roles():
    policies = {name: method.lone_tensor for name, method in METHODS.items()}
    assert {n for n, p in policies.items() if p is LoneTensorPolicy.COPY_ONLY_COPY} == {
        "slerp", "nuslerp", "arcee_fusion"
    }
    assert policies["nearswap"] is LoneTensorPolicy.COPY_IF_BASE
    assert policies["model_stock"] is LoneTensorPolicy.MODEL_STOCK
    assert {n for n, m in METHODS.items() if m.base_role is BaseRole.INPUT} == {"linear", "karcher", "passthrough"}
    assert {n for n, m in METHODS.items() if m.base_role is BaseRole.OPTIONAL} == {"nuslerp", "multislerp"}


@pytest.mark.parametrize(
    "name, n_non_base, has_base, fragment",
    [
        ("slerp", 2, True, "but the recipe has 2 models besides the base"),
        ("slerp", 2, False, "but the recipe has no base_model"),
        ("nearswap", 3, True, "NearSwap blends exactly two models"),
        ("arcee_fusion", 0, True, "0 models besides the base"),
        ("nuslerp", 3, True, "but the recipe has 3 models besides the base"),
        ("nuslerp", 1, False, "1 model besides the base"),
        ("model_stock", 1, True, "at least two other models fine-tuned from it, but the recipe has 1 other model"),
        ("model_stock", 3, False, "no base_model"),
        ("passthrough", 2, False, "but 2 models supply each tensor"),
        ("passthrough", 1, True, "but 2 models supply each tensor"),
        ("multislerp", 0, True, "at least one model"),
    ],
)
def test_input_count_rules_refuse_with_a_message(name, n_non_base, has_base, fragment):
    message = get_method(name).check_inputs(n_non_base, has_base)
    assert message is not None and fragment in message
    assert not message.endswith(".")  # the validator appends where (" in slice 2") and the full stop


@pytest.mark.parametrize(
    "name, n_non_base, has_base",
    [
        ("slerp", 1, True), ("nearswap", 1, True), ("arcee_fusion", 1, True), ("nuslerp", 2, False),
        ("nuslerp", 2, True), ("model_stock", 2, True), ("model_stock", 5, True), ("passthrough", 1, False),
        ("multislerp", 4, False), ("ties", 1, True), ("ties", 6, True), ("karcher", 3, False), ("linear", 2, False),
    ],
)  # fmt: skip
def test_input_count_rules_accept_valid_counts(name, n_non_base, has_base):
    assert get_method(name).check_inputs(n_non_base, has_base) is None


def test_every_method_declares_its_working_copies_and_the_estimator_reads_them(tmp_path):
    """Adding a method is one declaration: the estimate knows nothing per method name, only the declaration."""
    from dataclasses import replace  # noqa: PLC0415

    from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune  # noqa: PLC0415
    from guiapp.merging.merge import plan_merge, working_set  # noqa: PLC0415
    from guiapp.merging.methods.base import WorkingCopies  # noqa: PLC0415
    from guiapp.merging.recipe import parse_recipe  # noqa: PLC0415

    assert all(isinstance(method.working_copies, WorkingCopies) for method in METHODS.values())
    shape = LlamaShape(hidden=64, intermediate=128, layers=1, heads=4, kv_heads=2, vocab=256)
    base = write_llama(tmp_path / "base", shape, seed=0)
    tuned = write_llama_finetune(tmp_path / "tuned", base, seed=1)
    plan = plan_merge(parse_recipe(
        f"merge_method: ties\nbase_model: {base}\nmodels:\n  - model: {tuned}\n    parameters: {{weight: 1.0}}\n"
    ))
    declared = working_set(plan)
    plan.method = replace(plan.method, working_copies=WorkingCopies(40.0, 0.4))
    assert working_set(plan) > declared
