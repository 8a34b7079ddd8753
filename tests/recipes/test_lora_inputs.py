"""Recipes with a `model+adapter` input: the adapter is applied on the fly, in float32, while the merge reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from guiapp.checkpoints.adapters import LoraAdapter
from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.lora.extract import ExtractionSettings, extract_lora
from guiapp.lora.lowrank import RankRule
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.methods.nearswap import nearswap
from guiapp.merging.recipe import parse_recipe
from tests.engine.helpers import load_folder
from tests.support.default_dtype import default_dtype, in_new_thread


@pytest.fixture(scope="module")
def bf16_models(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A bf16 base, a bf16 fine-tune of it, and a LoRA adapter (bf16) extracted from a second fine-tune."""
    folder = tmp_path_factory.mktemp("lora-inputs")
    base = write_llama(folder / "base", LlamaShape(layers=2), dtype=torch.bfloat16, seed=0)
    one = write_llama_finetune(folder / "one", base, seed=1, delta_rank=None)
    two = write_llama_finetune(folder / "two", base, seed=2, delta_rank=4)
    adapter = folder / "adapter"
    extract_lora(ExtractionSettings(str(base), str(two), adapter, rule=RankRule("fixed", 4)))
    return base, one, adapter


def _adapted(base: Path, adapter: Path) -> dict[str, torch.Tensor]:
    """The base's tensors with the adapter applied (float32 where it adds an update)."""
    lora = LoraAdapter.open(adapter)
    return {name: lora.apply_to(name, tensor) for name, tensor in load_folder(base).items()}


def _merged(text: str, out: Path) -> dict[str, torch.Tensor]:
    return load_folder(run_merge(parse_recipe(text), MergeSettings(out)).output)


@pytest.mark.parametrize("method", ["task_arithmetic", "linear"])
@pytest.mark.parametrize("adapted_first", [True, False])
def test_a_bf16_merge_with_an_adapted_input_is_computed_in_float32(bf16_models, tmp_path, method, adapted_first):
    base, one, adapter = bf16_models
    inputs = [f"  - model: {one}\n    parameters: {{weight: 0.5}}\n",
              f"  - model: {base}+{adapter}\n    parameters: {{weight: 0.5}}\n"]
    merged = _merged(
        f"merge_method: {method}\n" + (f"base_model: {base}\n" if method == "task_arithmetic" else "")
        + "dtype: bfloat16\nmodels:\n"
        + "".join(reversed(inputs) if adapted_first else inputs),
        tmp_path / "out",
    )
    plain, tuned, adapted = load_folder(base), load_folder(one), _adapted(base, adapter)
    changed = [name for name in plain if adapted[name].dtype == torch.float32]
    assert changed  # the adapter changes some tensors, so the float32 path is what the test looks at
    close = {}
    for name in plain:
        # `dtype: bfloat16` rounds every input to bf16 as it is read, the adapted one too (as mergekit's does)
        b, x, a = plain[name].float(), tuned[name].float(), adapted[name].to(torch.bfloat16).float()
        assert merged[name].dtype == torch.bfloat16, name
        for applied, other in ((True, a), (False, b)):
            expected = b + (x - b) * 0.5 + (other - b) * 0.5 if method == "task_arithmetic" else (x + other) * 0.5
            # within a bf16 entry's rounding (the order of the sum differs)
            close[name, applied] = torch.allclose(merged[name].float(), expected.to(torch.bfloat16).float(),
                                                  rtol=2**-7, atol=1e-5)
    assert all(close[name, True] for name in plain), [name for name in plain if not close[name, True]]
    assert not all(close[name, False] for name in changed)  # the adapter's updates are seen

def test_nearswap_with_an_adapted_input(bf16_models, tmp_path):
    base, one, adapter = bf16_models
    merged = _merged(
        f"merge_method: nearswap\nbase_model: {one}\ndtype: bfloat16\nparameters: {{t: 0.001}}\n"
        f"models:\n  - model: {base}+{adapter}\n",
        tmp_path / "out",
    )
    adapted, tuned = _adapted(base, adapter), load_folder(one)
    for name, tensor in merged.items():
        assert tensor.dtype == torch.bfloat16, name
        other = adapted[name].to(torch.bfloat16).float()
        expected = nearswap(0.001, tuned[name].float(), other).to(torch.bfloat16)
        torch.testing.assert_close(tensor, expected)


@pytest.mark.parametrize("method", ["task_arithmetic", "linear"])
def test_an_adapted_input_is_the_same_whatever_the_default_dtype(bf16_models, tmp_path, method):
    """transformers sets torch's default dtype to the model's while it builds one, for the whole process: a Try
    loading a bf16 model in another thread must not change a merge's adapted input."""
    base, one, adapter = bf16_models
    text = (f"merge_method: {method}\n" + (f"base_model: {base}\n" if method == "task_arithmetic" else "")
            + f"dtype: bfloat16\nmodels:\n  - model: {one}\n    parameters: {{weight: 0.5}}\n"
            f"  - model: {base}+{adapter}\n    parameters: {{weight: 0.5}}\n")
    expected = in_new_thread(lambda: _merged(text, tmp_path / "float32"))
    with default_dtype(torch.bfloat16):
        got = in_new_thread(lambda: _merged(text, tmp_path / "bfloat16"))
    assert all(torch.equal(got[name], expected[name]) for name in expected), \
        [name for name in expected if not torch.equal(got[name], expected[name])]
