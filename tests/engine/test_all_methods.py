"""Every registered method merges real checkpoints end to end, without touching its (memory-mapped) inputs.

float32 inputs are handed to the methods straight from the memory map (no dtype cast copies them), so a
method that wrote into its inputs would crash or corrupt the files here.
"""

from __future__ import annotations

import pytest
import torch

from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.methods import METHODS
from tests.engine.helpers import fingerprint, float32_trio_in, load_folder, recipe, recipe_for_method


@pytest.fixture(scope="module")
def float32_trio(tmp_path_factory):
    return float32_trio_in(tmp_path_factory.mktemp("f32"), layers=2)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_method_merges_checkpoints_and_leaves_inputs_intact(method, float32_trio, tmp_path):
    base, one, two = float32_trio
    before = [fingerprint(p) for p in float32_trio]
    out = tmp_path / "out"
    outcome = run_merge(recipe(recipe_for_method(method, base, one, two)), MergeSettings(out, seed=7))
    merged, reference = load_folder(out), load_folder(base)
    assert merged.keys() == reference.keys()
    for name, tensor in merged.items():
        assert tensor.shape == reference[name].shape and tensor.dtype == torch.float32
        assert torch.isfinite(tensor).all(), name
    assert [fingerprint(p) for p in float32_trio] == before
    if method in ("ties", "dare_ties", "breadcrumbs", "della"):
        assert 0.0 < outcome.summary()["mean_kept_fraction"] < 1.0
