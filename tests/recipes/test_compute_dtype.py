"""`--compute-dtype recipe`: arithmetic in the recipe's dtype as mergekit does, instead of float32 cast once."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest
import torch
from safetensors.torch import load_file

from guiapp.errors import DeviceError
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.recipe import parse_recipe
from guiapp.system.capabilities import JOB_OPERATIONS, require_compute
from guiapp.system.probe import (
    Check,
    ProbeResult,
    cache_file,
    machine_fingerprint,
    store,
)
from tests.engine.helpers import load_folder
from tests.support import warm_cli
from tests.support.filesystems import small_filesystem

NAME = "model.layers.0.mlp.up_proj.weight"


def _mergesmith(*args: str) -> subprocess.CompletedProcess:
    """`mergesmith ARGS` in a process of its own, with this process's environment now (torch imported once)."""
    return warm_cli.shared().run([str(arg) for arg in args], timeout=300)


def _recipe(base, one):
    return parse_recipe(f"merge_method: task_arithmetic\nbase_model: {base}\ndtype: bfloat16\n"
                        f"models:\n  - model: {one}\n    parameters: {{weight: 0.3}}\n")


def test_recipe_dtype_arithmetic_matches_a_bf16_computation(llama_pair, tmp_path):
    base, one, _ = llama_pair
    b = load_file(base / "model.safetensors")[NAME].to(torch.bfloat16)
    x = load_file(one / "model.safetensors")[NAME].to(torch.bfloat16)
    # mergekit's task arithmetic in bf16: every step rounded to bf16, the weight too (mergekit makes a tensor of the
    # weights in the deltas' dtype: 0.3 becomes 0.30078125).
    in_bf16 = b + (x - b) * torch.tensor(0.3, dtype=torch.bfloat16)
    in_float32 = (b.float() + (x.float() - b.float()) * 0.3).to(torch.bfloat16)
    assert not torch.equal(in_bf16, in_float32)  # otherwise this test could not tell the two apart
    assert not torch.equal(in_bf16, b + (x - b) * 0.3)  # nor the weight rounded from not

    outcome = run_merge(_recipe(base, one), MergeSettings(tmp_path / "recipe", compute_dtype="recipe"))
    assert torch.equal(load_folder(outcome.output)[NAME], in_bf16)
    assert "Computed in the recipe's dtype (bfloat16)" in (outcome.output / "README.md").read_text()

    default = run_merge(_recipe(base, one), MergeSettings(tmp_path / "default"))
    assert torch.equal(load_folder(default.output)[NAME], in_float32)
    assert "Computed in float32 and rounded once to bfloat16" in (default.output / "README.md").read_text()


def test_cli_dry_run_reports_the_compute_dtype_and_the_run_follows_it(llama_pair, tmp_path):
    base, one, _ = llama_pair
    recipe = tmp_path / "r.yml"
    recipe.write_text(f"merge_method: task_arithmetic\nbase_model: {base}\ndtype: bfloat16\n"
                      f"models:\n  - model: {one}\n    parameters: {{weight: 0.3}}\n")
    run = _mergesmith("merge", recipe, tmp_path / "out", "--dry-run", "--compute-dtype", "recipe")
    assert run.returncode == 0, run.stderr
    assert "computed in bfloat16" in run.stdout
    # Without a probe of this machine nothing was seen to fail: the run goes ahead too.
    run = _mergesmith("merge", recipe, tmp_path / "out", "--compute-dtype", "recipe")
    assert run.returncode == 0, run.stderr


def _without_bf16(probed: ProbeResult) -> ProbeResult:
    """`probed` as if merges in bfloat16 had failed on this CPU."""
    operation = JOB_OPERATIONS["merge"][0]
    checks = [c for c in probed.checks if (c.dtype, c.operation) != ("bfloat16", operation)]
    return dataclasses.replace(probed, checks=[*checks, Check("cpu", "bfloat16", operation, ok=False, error="boom")])


def test_a_dtype_the_probe_saw_fail_is_refused_with_a_retry(probed):
    assert probed.problem is None, probed.problem
    require_compute(probed, "merge", "cpu", "bfloat16")  # this CPU computes merges in bf16
    with pytest.raises(DeviceError, match="cannot compute in bfloat16 on cpu") as caught:
        require_compute(_without_bf16(probed), "merge", "cpu", "bfloat16")
    assert caught.value.remedy.changes == {"compute_dtype": "float32"}


@pytest.mark.parametrize(("settings", "refusal"), [
    (["--compute-dtype", "recipe"], "cannot compute in bfloat16 on cpu"),
    (["--device", "cuda:7"], "The device cuda:7 is not available"),
])
def test_a_dry_run_refuses_what_the_run_refuses(probed, llama_pair, tmp_path, monkeypatch, settings, refusal):
    base, one, _ = llama_pair
    monkeypatch.setenv("MERGESMITH_CACHE_DIR", str(tmp_path / "cache"))
    store(_without_bf16(probed), cache_file(machine_fingerprint()))
    recipe = tmp_path / "r.yml"
    recipe.write_text(f"merge_method: task_arithmetic\nbase_model: {base}\ndtype: bfloat16\n"
                      f"models:\n  - model: {one}\n    parameters: {{weight: 0.3}}\n")
    for dry_run in ([], ["--dry-run"]):
        run = _mergesmith("merge", recipe, tmp_path / "out", *settings, *dry_run)
        assert run.returncode == 1 and refusal in run.stderr, (dry_run, run.stderr)
        assert "Traceback" not in run.stderr and not (tmp_path / "out").exists()


def test_a_dry_run_refuses_an_output_that_will_not_fit_as_the_run_does(llama_pair, tmp_path):
    base, one, _ = llama_pair
    recipe = tmp_path / "r.yml"
    recipe.write_text(f"merge_method: task_arithmetic\nbase_model: {base}\n"
                      f"models:\n  - model: {one}\n    parameters: {{weight: 0.3}}\n")
    with small_filesystem(tmp_path / "small", "64K") as small:
        for dry_run in ([], ["--dry-run"]):
            run = _mergesmith("merge", recipe, small / "out", *dry_run)
            assert run.returncode == 1 and "This job will not fit: the output needs" in run.stderr, (dry_run, run.stderr)
            assert "Nothing was written" not in run.stdout and not (small / "out").exists()


@pytest.mark.parametrize("method", ["linear", "slerp"])
def test_recipe_dtype_keeps_float32_where_mergekit_computes_in_float32(llama_pair, tmp_path, method):
    """mergekit 0.1.5 computes linear and slerp in float32 whatever the recipe's dtype, rounding once at the end."""
    base, one, _ = llama_pair
    text = (f"merge_method: linear\ndtype: bfloat16\nmodels:\n  - model: {base}\n    parameters: {{weight: 0.3}}\n"
            f"  - model: {one}\n    parameters: {{weight: 0.7}}\n" if method == "linear" else
            f"merge_method: slerp\nbase_model: {base}\ndtype: bfloat16\nparameters: {{t: 0.3}}\n"
            f"models:\n  - model: {base}\n  - model: {one}\n")
    b = load_file(base / "model.safetensors")[NAME].to(torch.bfloat16)
    x = load_file(one / "model.safetensors")[NAME].to(torch.bfloat16)
    in_bf16 = b * 0.3 + x * 0.7
    assert not torch.equal(in_bf16, (b.float() * 0.3 + x.float() * 0.7).to(torch.bfloat16))  # they differ here

    recipe = run_merge(parse_recipe(text), MergeSettings(tmp_path / "recipe", compute_dtype="recipe"))
    default = run_merge(parse_recipe(text), MergeSettings(tmp_path / "default"))
    ours, usual = load_folder(recipe.output), load_folder(default.output)
    assert all(torch.equal(ours[name], usual[name]) for name in usual)
    assert f"as mergekit computes {method} whatever the recipe's dtype" in (recipe.output / "README.md").read_text()
