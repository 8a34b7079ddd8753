"""Every registered method merges real checkpoints end to end, without touching its (memory-mapped) inputs.

float32 inputs are handed to the methods straight from the memory map (no dtype cast copies them), so a
method that wrote into its inputs would crash or corrupt the files here.
"""

from __future__ import annotations

import pytest
import torch

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.methods import METHODS
from tests.engine.helpers import fingerprint, load_folder, recipe

TWO_INPUTS = {"slerp", "nearswap", "arcee_fusion"}


@pytest.fixture(scope="module")
def float32_trio(tmp_path_factory):
    folder = tmp_path_factory.mktemp("f32")
    base = write_llama(folder / "base", LlamaShape(layers=2), dtype=torch.float32, seed=0)
    return base, write_llama_finetune(folder / "one", base, seed=1, delta_rank=None), \
        write_llama_finetune(folder / "two", base, seed=2, delta_rank=None)


def _recipe_for(method: str, base, one, two) -> str:
    if method == "passthrough":
        return f"merge_method: passthrough\nmodels:\n  - model: {one}\n"
    if method in TWO_INPUTS:
        extra = {"slerp": "parameters: {t: 0.3}\n", "nearswap": "parameters: {t: 0.001}\n"}.get(method, "")
        return f"merge_method: {method}\nbase_model: {base}\nmodels:\n  - model: {one}\n{extra}"
    weights = "weight: 0.6, density: 0.7" if method not in ("karcher", "model_stock", "ram", "ramplus_tl", "sce") else "weight: 0.6"
    if method.startswith("della"):
        weights += ", epsilon: 0.1"
    base_line = "" if method in ("karcher", "linear") else f"base_model: {base}\n"
    return (f"merge_method: {method}\n{base_line}models:\n  - model: {one}\n    parameters: {{{weights}}}\n"
            f"  - model: {two}\n    parameters: {{{weights}}}\n")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_method_merges_checkpoints_and_leaves_inputs_intact(method, float32_trio, tmp_path):
    base, one, two = float32_trio
    before = [fingerprint(p) for p in float32_trio]
    out = tmp_path / "out"
    outcome = run_merge(recipe(_recipe_for(method, base, one, two)), MergeSettings(out, seed=7))
    merged, reference = load_folder(out), load_folder(base)
    assert merged.keys() == reference.keys()
    for name, tensor in merged.items():
        assert tensor.shape == reference[name].shape and tensor.dtype == torch.float32
        assert torch.isfinite(tensor).all(), name
    assert [fingerprint(p) for p in float32_trio] == before
    if method in ("ties", "dare_ties", "breadcrumbs", "della"):
        assert 0.0 < outcome.summary()["mean_kept_fraction"] < 1.0
