"""Recipes naming Hub models (validated from headers, before any download) and `model+adapter` references."""

from __future__ import annotations

import pytest
import torch

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.errors import IncompatibleModelsError
from guiapp.lora.extract import ExtractionSettings, extract_lora
from guiapp.lora.lowrank import RankRule
from guiapp.merging.merge import MergeSettings, plan_merge, run_merge
from tests.engine.helpers import load_folder, recipe
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - pytest fixtures


def test_hub_models_are_validated_from_headers_then_downloaded(hub_env, tmp_path):
    shape = LlamaShape(hidden=128, intermediate=512, layers=2)
    base = write_llama(tmp_path / "base", shape, seed=0)
    tuned = write_llama_finetune(tmp_path / "tuned", base, seed=3)
    wide = write_llama(tmp_path / "wide", LlamaShape(hidden=192, intermediate=512, layers=2), seed=0)
    assert (base / "model.safetensors").stat().st_size > 1_000_000
    server = hub_env.server
    server.add_model("acme/base", base)
    server.add_model("acme/tuned", tuned)
    server.add_model("acme/wide", wide)

    text = "merge_method: task_arithmetic\nbase_model: acme/base\nmodels:\n  - model: acme/tuned\n    parameters: {weight: 1}\n"
    plan = plan_merge(recipe(text))
    assert len(plan.tasks) == len(load_folder(base))
    # huggingface_hub asks for the first 100 kB, which hold the header: the weights are not transferred
    assert server.bytes_sent("acme/base", "model.safetensors") <= 100_001
    assert server.bytes_sent("acme/tuned", "model.safetensors") <= 100_001

    with pytest.raises(IncompatibleModelsError, match="shapes"):
        plan_merge(recipe(text.replace("acme/tuned", "acme/wide")))
    assert server.bytes_sent("acme/wide", "model.safetensors") <= 100_001

    out = tmp_path / "merged"
    run_merge(recipe(text), MergeSettings(out))
    merged, expected = load_folder(out), load_folder(tuned)
    assert all(torch.equal(merged[name], expected[name]) for name in expected)
    assert "base_model:\n- acme/tuned\n- acme/base\n" in (out / "README.md").read_text()


def test_model_plus_adapter_is_applied_on_the_fly(tmp_path):
    base = write_llama(tmp_path / "base", LlamaShape(layers=2), dtype=torch.float32, seed=0)
    tuned = write_llama_finetune(tmp_path / "tuned", base, seed=4, delta_rank=2, delta_scale=0.05)
    adapter = tmp_path / "adapter"
    extract_lora(ExtractionSettings(base=str(base), model=str(tuned), out=adapter, rule=RankRule("fixed", 4), solver="exact"))

    out = tmp_path / "merged"
    run_merge(recipe(f"merge_method: passthrough\nmodels:\n  - model: {base}+{adapter}\n"), MergeSettings(out))
    merged, expected = load_folder(out), load_folder(tuned)
    for name, tensor in expected.items():
        assert torch.allclose(merged[name], tensor, atol=1e-5), name

    other = write_llama(tmp_path / "other", LlamaShape(layers=2, hidden=96), dtype=torch.float32)
    with pytest.raises(IncompatibleModelsError, match="does not fit the base model"):
        plan_merge(recipe(f"merge_method: passthrough\nmodels:\n  - model: {other}+{adapter}\n"))


def test_extraction_from_the_hub_refuses_an_unrelated_pair_before_downloading(hub_env, tmp_path):
    small = write_llama(tmp_path / "small", LlamaShape(hidden=128, intermediate=512, layers=2), seed=0)
    wide = write_llama(tmp_path / "wide", LlamaShape(hidden=192, intermediate=512, layers=2), seed=0)
    hub_env.server.add_model("acme/small", small)
    hub_env.server.add_model("acme/wide", wide)
    with pytest.raises(IncompatibleModelsError):
        extract_lora(ExtractionSettings(base="acme/small", model="acme/wide", out=tmp_path / "adapter"))
    assert hub_env.server.bytes_sent("acme/small", "model.safetensors") <= 100_001
    assert hub_env.server.bytes_sent("acme/wide", "model.safetensors") <= 100_001
    assert not (tmp_path / "adapter").exists()
