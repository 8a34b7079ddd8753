"""DoRA adapters made by PEFT: applied into a model folder and on the fly in a recipe, as PEFT merges them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from guiapp.__main__ import main
from guiapp.cli.process import EXIT_OK
from guiapp.errors import IncompatibleModelsError
from guiapp.merging.merge import MergeSettings, run_merge
from tests.engine.helpers import recipe
from tests.lora.helpers import model_tensors
from tests.lora.peft_adapters import peft_merged, write_peft_adapter
from tests.tryout.models import write_causal

TARGETS = ["q_proj", "v_proj", "down_proj", "embed_tokens", "lm_head"]


@pytest.fixture(scope="module")
def fp32_base(tmp_path_factory) -> Path:
    return write_causal(tmp_path_factory.mktemp("dora") / "base-fp32", torch.float32, seed=6)


@pytest.fixture(scope="module")
def dora(fp32_base: Path) -> Path:
    return write_peft_adapter(fp32_base, fp32_base.parent / "dora", seed=7, magnitude_noise=0.2, use_dora=True,
                              target_modules=TARGETS)


def test_apply_lora_writes_what_peft_merge_and_unload_gives(fp32_base, dora, tmp_path):
    out = tmp_path / "applied"
    assert main(["apply-lora", "--base", str(fp32_base), "--adapter", str(dora), "--out", str(out)]) == EXIT_OK
    ours, peft_result = model_tensors(out), peft_merged(fp32_base, dora)
    base = model_tensors(fp32_base)
    differences = {name: (ours[name] - peft_result[name]).abs().max().item() for name in ours}
    print(f"largest difference from PEFT's merge_and_unload: {max(differences.values()):.3g}")
    assert max(differences.values()) < 1e-5
    changed = [name for name in ours if not torch.equal(ours[name], base[name])]
    assert {name.split(".")[-2] for name in changed} == set(TARGETS)


def test_a_dora_magnitude_of_the_wrong_length_is_refused(fp32_base, dora, tmp_path):
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text((dora / "adapter_config.json").read_text())
    tensors = load_file(dora / "adapter_model.safetensors")
    key = next(k for k in tensors if k.endswith("q_proj.lora_magnitude_vector"))
    tensors[key] = tensors[key][:-1].clone()
    save_file(tensors, broken / "adapter_model.safetensors")
    with pytest.raises(IncompatibleModelsError, match="DoRA magnitudes are for 63 features"):
        from guiapp.lora.apply import ApplySettings, apply_lora

        apply_lora(ApplySettings(str(fp32_base), str(broken), tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_recipe_applies_a_dora_adapter_on_the_fly(fp32_base, dora, tmp_path):
    out = tmp_path / "merged"
    run_merge(recipe(f"merge_method: passthrough\nmodels:\n  - model: {fp32_base}+{dora}\n"), MergeSettings(out))
    ours, peft_result = model_tensors(out), peft_merged(fp32_base, dora)
    assert max((ours[name] - peft_result[name]).abs().max().item() for name in ours) < 1e-5


def test_gpt2_conv1d_dora_normalises_the_stored_columns_as_peft_does(tmp_path):
    import transformers

    config = transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=1, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "base")
    base = tmp_path / "base"
    adapter = write_peft_adapter(base, tmp_path / "dora", seed=3, magnitude_noise=0.2, use_dora=True,
                                 target_modules=["c_attn", "c_fc", "wte"], fan_in_fan_out=True)
    out = tmp_path / "applied"
    assert main(["apply-lora", "--base", str(base), "--adapter", str(adapter), "--out", str(out)]) == EXIT_OK
    ours, peft_result = model_tensors(out), peft_merged(base, adapter)
    assert max((ours[name] - peft_result[name]).abs().max().item() for name in ours) < 1e-5
