"""Hostile adapter configurations (adapter_config.json) for apply-lora, try and perplexity: every field the
adapter's configuration gives is checked where it is read, with the field's name and the file in the message;
a pattern that backtracks never runs without a time bound, in PEFT either."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from guiapp.jobs.runner import JobStatus, run_job
from guiapp.jobs.specs import apply_job
from guiapp.jobs.tryout import perplexity_job, try_job
from guiapp.system.explain import explain
from tests.faults.harness import fingerprint


def _hostile(adapter: Path, folder: Path, **changes) -> Path:
    """A copy of `adapter` whose adapter_config.json has `changes` (None removes nothing: it is written as null)."""
    copy = Path(shutil.copytree(adapter, folder))
    config_path = copy / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config.update(changes)
    config_path.write_text(json.dumps(config))
    return copy


def _refusal(job, inputs: list[Path]) -> str:
    """Run `job`, which must fail with a recognised explanation that says what to do; the message shown."""
    before = fingerprint(*inputs)
    result = run_job(job)
    assert result.status is JobStatus.FAILED, result.summary
    explanation = explain(result.error)
    assert explanation.recognised, explanation.render_text()
    assert explanation.fix and "Traceback" not in explanation.what
    assert fingerprint(*inputs) == before
    return explanation.what


BAD_FIELDS = [
    ("r", 0), ("r", None), ("r", "abc"), ("r", -4), ("r", 2.5), ("r", True),
    ("lora_alpha", "sixteen"), ("lora_alpha", None), ("lora_alpha", float("nan")),
    ("target_modules", 7), ("target_modules", ["q_proj", 3]), ("target_modules", {"q_proj": 1}),
    ("rank_pattern", ["q_proj"]), ("rank_pattern", {"q_proj": 0}), ("rank_pattern", {"q_proj": "four"}),
    ("alpha_pattern", {"q_proj": -1}), ("alpha_pattern", {"q_proj": None}), ("alpha_pattern", "q_proj"),
]


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS, ids=[f"{f}={v!r}" for f, v in BAD_FIELDS])
def test_bad_field_in_adapter_config_for_apply_lora(field, value, causal_bf16, bf16_adapter, tmp_path):
    hostile = _hostile(bf16_adapter, tmp_path / "hostile", **{field: value})
    out = tmp_path / "out"
    what = _refusal(apply_job(str(causal_bf16), str(hostile), out), [hostile, causal_bf16])
    assert field in what and str(hostile / "adapter_config.json") in what
    assert not out.exists()


@pytest.mark.parametrize(("field", "value"), [("r", "abc"), ("lora_alpha", None), ("target_modules", 7)])
def test_bad_field_in_adapter_config_for_perplexity(field, value, causal_bf16, bf16_adapter, tmp_path, probe_in_cache):
    hostile = _hostile(bf16_adapter, tmp_path / "hostile", **{field: value})
    what = _refusal(perplexity_job([f"{causal_bf16}+{hostile}"], "the cat sat on the mat", probe_result=probe_in_cache),
                    [hostile, causal_bf16])
    assert field in what and str(hostile / "adapter_config.json") in what


def test_backtracking_target_modules_in_try(causal_bf16, bf16_adapter, tmp_path, probe_in_cache):
    # PEFT matched a string target_modules with re.fullmatch on every module name, with no time bound: this one
    # never finished. PEFT now gets the adapted modules by name, so the adapter works as its weights say.
    hostile = _hostile(bf16_adapter, tmp_path / "hostile", target_modules="(.*){1,32000}[bc]")
    tried = [run_job(try_job([f"{causal_bf16}+{adapter}"], "the cat", max_new_tokens=6, dtype="float32",
                             probe_result=probe_in_cache)) for adapter in (hostile, bf16_adapter)]
    assert [result.status for result in tried] == [JobStatus.DONE, JobStatus.DONE], tried[0].error
    assert tried[0].summary["generations"][0]["tokens"] == tried[1].summary["generations"][0]["tokens"]


@pytest.mark.parametrize("pattern", ["(q_proj", "x" * 3000])
def test_target_modules_that_is_no_pattern_is_refused(pattern, causal_bf16, bf16_adapter, tmp_path, probe_in_cache):
    hostile = _hostile(bf16_adapter, tmp_path / "hostile", target_modules=pattern)
    what = _refusal(perplexity_job([f"{causal_bf16}+{hostile}"], "the cat sat on the mat", probe_result=probe_in_cache),
                    [hostile, causal_bf16])
    assert "target_modules" in what and str(hostile / "adapter_config.json") in what


def test_adapter_with_patterns_gives_what_peft_gives(causal_fp32, tmp_path):
    # The patterns are resolved into exact module names before PEFT sees them: the result must not change.
    import peft
    import torch
    import transformers

    from guiapp.inference.running import load_model, resolve_sources

    torch.manual_seed(5)
    base = transformers.AutoModelForCausalLM.from_pretrained(causal_fp32, dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=r".*\.(q_proj|v_proj|down_proj)",
                             rank_pattern={"v_proj": 2}, alpha_pattern={r"layers\.1\.mlp\.down_proj": 3},
                             init_lora_weights=False, task_type="CAUSAL_LM")
    peft.get_peft_model(base, config).save_pretrained(tmp_path / "adapter")
    ids = torch.tensor([[1, 7, 9, 11, 13]])
    direct = peft.PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(causal_fp32, dtype=torch.float32), tmp_path / "adapter")
    loaded = load_model(resolve_sources([f"{causal_fp32}+{tmp_path / 'adapter'}"])[0], torch.float32, "cpu")
    with torch.inference_mode():
        expected, got = direct.eval()(input_ids=ids).logits, loaded.model(input_ids=ids).logits
        plain = transformers.AutoModelForCausalLM.from_pretrained(causal_fp32)(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-6)
    assert not torch.allclose(got, plain, atol=1e-3)  # the adapter changes the output


def test_bad_field_in_adapter_config_read_for_its_metadata(bf16_adapter, tmp_path):
    # `hub info` and merge planning read an adapter's configuration when it has no config.json.
    from guiapp.errors import CheckpointError
    from guiapp.hub.references import ModelRef
    from guiapp.hub.resolve import read_model_metadata

    hostile = _hostile(bf16_adapter, tmp_path / "hostile", lora_alpha="sixteen")
    with pytest.raises(CheckpointError, match="lora_alpha"):
        read_model_metadata(ModelRef.parse(str(hostile)))
    assert read_model_metadata(ModelRef.parse(str(bf16_adapter))).config["r"] == 4


@pytest.mark.parametrize("changes", [{"layer_replication": [[0, 2], [0, 2]]}], ids=["layer_replication"])
def test_adapter_that_rebuilds_layers_is_refused(changes, causal_bf16, bf16_adapter, tmp_path, probe_in_cache):
    # PEFT would build the replicated layers; applying the adapter tensor by tensor would ignore them.
    hostile = _hostile(bf16_adapter, tmp_path / "hostile", **changes)
    what = _refusal(perplexity_job([f"{causal_bf16}+{hostile}"], "the cat sat on the mat", probe_result=probe_in_cache),
                    [hostile, causal_bf16])
    assert "layer_replication" in what
