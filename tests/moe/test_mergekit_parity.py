"""The same configuration run by `mergesmith moe` and by mergekit-moe 0.1.5 (its own code, in this process): the
same tensors, the same config.json."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.moe.helpers import assemble, expert, write_config
from tests.support.lazy_import import LazyModule

mergekit_moe = LazyModule("mergekit.scripts.moe")
SEED = 7


def _mergekit(config_path, out):
    from mergekit.moe.config import MoEMergeConfig
    from mergekit.options import MergeOptions

    options = MergeOptions(random_seed=SEED, device="cpu")
    options.apply_global_options()
    config = MoEMergeConfig.model_validate(yaml.safe_load(config_path.read_text()))
    mergekit_moe.build(config, str(out), options, device="cpu")
    return load_file(out / "model.safetensors")


def _documents(models):
    three = [expert(models, n) for n in ("e0", "e1", "e2")]
    base = str(models["base"])
    return {
        "cheap_embed_bf16": {"base_model": base, "gate_mode": "cheap_embed", "dtype": "bfloat16", "experts": three},
        "random": {"base_model": base, "gate_mode": "random", "experts_per_token": 1,
                   "experts": [{"source_model": str(models[n]), "residual_scale": 0.5} for n in ("e0", "e1")]},
        "hidden": {"base_model": base, "gate_mode": "hidden", "experts": three[:2]},
        "qwen_shared_base": {"base_model": base, "gate_mode": "cheap_embed", "architecture": "qwen",
                             "experts": three[:2], "shared_experts": [{**expert(models, "e2"), "source_model": base}]},
        # An ungated shared expert: mergekit-moe picks DeepSeek-MoE, also for random gates (drawn for it too).
        "deepseek_shared_base": {"base_model": base, "gate_mode": "cheap_embed", "experts": three[:2],
                                 "shared_experts": [{"source_model": base, "residual_scale": 0.25}]},
        "random_deepseek": {"base_model": base, "gate_mode": "random", "dtype": "float16",
                            "experts": [{"source_model": str(models[n])} for n in ("e0", "e1", "e2")],
                            "shared_experts": [{"source_model": base}]},
    }


@pytest.mark.parametrize("case", ["cheap_embed_bf16", "random", "hidden", "qwen_shared_base", "deepseek_shared_base",
                                  "random_deepseek"])
def test_the_same_model_as_mergekit_moe(moe_models, tmp_path, stored_probe, case):
    path = write_config(tmp_path, _documents(moe_models)[case])
    ours = assemble(path, tmp_path / "ours", seed=SEED)
    theirs = _mergekit(path, tmp_path / "theirs")
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert (ours[name].dtype, ours[name].shape) == (tensor.dtype, tensor.shape), name
        # Hidden gates too: both run the base in bfloat16 with rotary frequencies kept in float32.
        assert torch.equal(ours[name], tensor), name
    mine, reference = (json.loads((tmp_path / side / "config.json").read_text()) for side in ("ours", "theirs"))
    assert mine == reference
