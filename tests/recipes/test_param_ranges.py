"""Parameter values mergekit accepts and computes are merged (with a warning outside the usual range); only values
mergekit fails on, or computes garbage from, are refused."""

from __future__ import annotations

import pytest
import torch

from guiapp.errors import RecipeError
from guiapp.merging.merge import MergeSettings, plan_merge, run_merge
from guiapp.merging.recipe import parse_recipe
from tests.engine.helpers import load_folder


def _text(method: str, one, two, base=None, params: str = "", model_params: str = "weight: 0.5") -> str:
    listed = "".join(f"  - model: {m}\n    parameters: {{{model_params}}}\n" for m in (one, two))
    return (f"merge_method: {method}\n" + (f"base_model: {base}\n" if base else "")
            + (f"parameters: {{{params}}}\n" if params else "") + f"models:\n{listed}")


def _merged(text: str, out) -> dict[str, torch.Tensor]:
    return load_folder(run_merge(parse_recipe(text), MergeSettings(out)).output)


def test_karcher_max_iter_of_a_published_card_merges_with_a_warning(llama_pair, tmp_path):
    base, one, two = llama_pair
    plan = plan_merge(parse_recipe(_text("karcher", one, two, params="max_iter: 9999, tol: 1e-5", model_params="")))
    assert any("max_iter" in w and "9999" in w and "1–1000" in w and "take long" in w for w in plan.warnings), \
        plan.warnings
    merged = _merged(_text("karcher", one, two, params="max_iter: 9999, tol: 1e-5", model_params=""), tmp_path / "a")
    # it converges long before either count of steps: the same result
    usual = _merged(_text("karcher", one, two, params="max_iter: 1000, tol: 1e-5", model_params=""), tmp_path / "b")
    assert all(torch.equal(merged[name], usual[name]) for name in usual)


# (method, with base?, parameters, per-model parameters) outside the usual range, and the usual values they
# compute the same as in mergekit (None: only that they merge, to finite values).
UNUSUAL = [
    ("ties", True, "", "weight: 0.5, density: 1.5", "weight: 0.5, density: 1.0"),
    ("dare_linear", True, "", "weight: 0.5, density: 1.5", "weight: 0.5, density: 1.0"),
    ("breadcrumbs", True, "", "weight: 0.5, density: 1.5, gamma: 0.01", "weight: 0.5, density: 1.0, gamma: 0.01"),
    ("della", True, "", "weight: 0.5, density: 1.0, epsilon: 0.7", "weight: 0.5, density: 1.0, epsilon: 0.1"),
    ("sce", True, "select_topk: 1.5", "weight: 0.5", None),
    ("sce", True, "select_topk: -0.5", "weight: 0.5", None),
    ("karcher", False, "max_iter: 0", "", None),
    ("slerp", True, "t: 1.2", "", None),
    ("nearswap", True, "t: -0.1", "", None),
    ("ramplus_tl", True, "r: 20, alpha: 20", "", None),
    ("multislerp", False, "eps: 0.1", "weight: 0.5", None),
]


@pytest.mark.parametrize(("method", "with_base", "params", "model_params", "same_as"), UNUSUAL,
                         ids=[f"{u[0]}-{u[2] or u[3]}" for u in UNUSUAL])
def test_values_mergekit_computes_are_merged_with_a_warning(llama_pair, tmp_path, method, with_base, params,
                                                             model_params, same_as):
    base, one, two = llama_pair
    models = (one,) if method in ("slerp", "nearswap") else (one, two)
    listed = "".join(f"  - model: {m}\n" + (f"    parameters: {{{model_params}}}\n" if model_params else "")
                     for m in models)
    head = f"merge_method: {method}\n" + (f"base_model: {base}\n" if with_base else "")
    text = head + (f"parameters: {{{params}}}\n" if params else "") + f"models:\n{listed}"
    plan = plan_merge(parse_recipe(text))
    assert any("usual" in w for w in plan.warnings), plan.warnings
    merged = _merged(text, tmp_path / "unusual")
    assert all(bool(torch.isfinite(t).all()) for t in merged.values())
    if same_as is not None:
        usual_listed = "".join(f"  - model: {m}\n    parameters: {{{same_as}}}\n" for m in models)
        usual = _merged(head + f"models:\n{usual_listed}", tmp_path / "usual")
        assert all(torch.equal(merged[name], usual[name]) for name in usual)


@pytest.mark.parametrize(("method", "params", "model_params", "name"), [
    ("karcher", "tol: -0.001", "", "tol"),  # every zero tensor would count and be divided by its norm
    ("ties", "", "weight: 0.5, density: -0.5", "density"),  # mergekit's DARE fails, breadcrumbs slices garbage
    ("della", "", "weight: 0.5, density: 0.5, epsilon: -0.1", "epsilon"),  # turns the method's ranking around
])
def test_values_mergekit_fails_on_or_computes_garbage_from_are_refused(llama_pair, method, params, model_params,
                                                                        name):
    base, one, two = llama_pair
    listed = "".join(f"  - model: {m}\n" + (f"    parameters: {{{model_params}}}\n" if model_params else "")
                     for m in (one, two))
    text = (f"merge_method: {method}\n" + ("" if method == "karcher" else f"base_model: {base}\n")
            + (f"parameters: {{{params}}}\n" if params else "") + f"models:\n{listed}")
    with pytest.raises(RecipeError, match=f"`{name}`"):
        plan_merge(parse_recipe(text))
