"""The export as a job and a command: refusals before anything is written, no finished-looking file after a
failure or a cancel, bf16 and BASE+ADAPTER sources, the dry run's sizes, and the perplexity check."""

from __future__ import annotations

import json
import shutil

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from guiapp.__main__ import main
from guiapp.errors import JobCancelled, OutputError, UnsupportedModelError
from guiapp.gguf.export import export_gguf
from guiapp.progress import CancelToken, Progress
from tests.gguf import models
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - the test Hub


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir())


def test_an_unknown_architecture_is_refused_by_name_before_anything_is_written(tiny_models, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_models["qwen2"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["GPTNeoXForCausalLM"]
    (folder / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UnsupportedModelError, match="GPTNeoXForCausalLM"):
        export_gguf(str(folder), out / "model.gguf", "q8_0")
    assert _leftovers(out) == []


def test_a_tensor_without_a_place_is_refused_by_name(tiny_models, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_models["qwen2"], folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["vision_tower.patch.weight"] = torch.zeros(4, 4)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UnsupportedModelError, match="vision_tower.patch.weight"):
        export_gguf(str(folder), tmp_path / "model.gguf", "q8_0")
    assert not (tmp_path / "model.gguf").exists()


def test_an_existing_file_is_never_replaced(tiny_models, tmp_path):
    out = tmp_path / "model.gguf"
    out.write_bytes(b"mine")
    with pytest.raises(OutputError, match="already exists") as raised:
        export_gguf(str(tiny_models["qwen2"]), out, "q8_0")
    assert out.read_bytes() == b"mine" and "model-2.gguf" in raised.value.hint


def test_a_file_inside_the_input_model_is_refused(tiny_models, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_models["qwen2"], folder)
    with pytest.raises(OutputError, match="input"):
        export_gguf(str(folder), folder / "model.gguf", "q8_0")
    assert not (folder / "model.gguf").exists()


def test_a_cancelled_export_leaves_no_file(tiny_models, tmp_path):
    token = CancelToken()
    steps = []

    def on_event(event):
        steps.append(event)
        if event.stage.startswith("Exporting") and event.done >= 3:
            token.cancel()

    with pytest.raises(JobCancelled):
        export_gguf(str(tiny_models["llama"]), tmp_path / "model.gguf", "q4_k_m", Progress(on_event, cancel=token))
    assert any(event.stage.startswith("Exporting") for event in steps)
    assert [name for name in _leftovers(tmp_path) if "gguf" in name] == []


def test_a_bf16_model_exports_to_bf16_bit_for_bit(tmp_path):
    import transformers

    folder = models.qwen2(tmp_path / "model")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    source = load_file(folder / "model.safetensors")
    export_gguf(str(folder), tmp_path / "model.gguf", "bf16")
    stored = {t.name: t for t in gguf.GGUFReader(tmp_path / "model.gguf").tensors}
    q = stored["blk.0.attn_q.weight"]
    assert q.tensor_type == gguf.GGMLQuantizationType.BF16
    want = source["model.layers.0.self_attn.q_proj.weight"].view(torch.int16).numpy()
    assert np.array_equal(np.array(q.data).view(np.int16).reshape(want.shape), want)


def test_a_base_with_its_adapter_exports_the_applied_model(tiny_models, tmp_path):
    import peft
    import transformers

    base = tiny_models["qwen2"]
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    torch.manual_seed(0)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"], init_lora_weights=False)
    peft.get_peft_model(model, config).save_pretrained(tmp_path / "adapter")
    export_gguf(f"{base}+{tmp_path / 'adapter'}", tmp_path / "applied.gguf", "f32")
    merged = peft.PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), tmp_path / "adapter"
    ).merge_and_unload()
    stored = {t.name: np.array(t.data) for t in gguf.GGUFReader(tmp_path / "applied.gguf").tensors}
    want = merged.model.layers[1].mlp.down_proj.weight.detach().numpy()
    assert np.allclose(stored["blk.1.ffn_down.weight"], want, atol=1e-6)
    original = load_file(base / "model.safetensors")["model.layers.1.mlp.down_proj.weight"].numpy()
    assert not np.allclose(stored["blk.1.ffn_down.weight"], original, atol=1e-4)


def test_the_dry_run_prints_three_digit_sizes_and_writes_nothing(tiny_models, tmp_path, capsys):
    out = tmp_path / "model.gguf"
    assert main(["export-gguf", str(tiny_models["llama"]), str(out), "--type", "Q4_K_M", "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "llama-bpe" in text and "rope theta 500000.0" in text and "q4_k_m" in text
    assert "826 KB" in text  # three significant digits
    assert not out.exists()
    assert main(["export-gguf", str(tiny_models["llama"]), str(out), "--type", "q8_0", "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["sizes"]) == {"f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0"}
    assert main(["export-gguf", str(tiny_models["llama"]), str(out), "--type", "q8_0", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["bytes"] == out.stat().st_size == report["predicted_bytes"]


def test_an_unknown_architecture_fails_the_command_with_an_explanation(tmp_path, capsys):
    from guiapp.checkpoints.samples import write_bert

    folder = write_bert(tmp_path / "bert")
    assert main(["export-gguf", str(folder), str(tmp_path / "x.gguf"), "--type", "f16", "--dry-run"]) != 0
    captured = capsys.readouterr()
    assert "BertModel" in captured.err or "Bert" in captured.err
    assert "Traceback" not in captured.err


def test_the_check_compares_the_files_perplexity_with_the_sources(tiny_models, exported):
    from guiapp.gguf.check import check_export

    close = check_export(str(tiny_models["qwen2"]), exported("qwen2", "q8_0"))
    coarse = check_export(str(tiny_models["qwen2"]), exported("qwen2", "q4_0"))
    assert close.tokens > 100
    assert abs(close.change_percent) < 0.5
    assert abs(coarse.change_percent) > abs(close.change_percent)
    assert close.summary().startswith(f"{close.change_percent:+.2f} % perplexity")


def test_the_demo_merge_exports_with_the_merges_llama_cpp_requires(tmp_path):
    from guiapp.checkpoints.samples import LlamaShape, write_byte_tokenizer, write_llama

    folder = write_llama(tmp_path / "merged", LlamaShape(), seed=0)
    write_byte_tokenizer(folder)
    export_gguf(str(folder), tmp_path / "merged.gguf", "q8_0")
    fields = {name: field.contents() for name, field in gguf.GGUFReader(tmp_path / "merged.gguf").fields.items()}
    assert fields["tokenizer.ggml.pre"] == "gpt-2" and len(fields["tokenizer.ggml.merges"]) == 1
    assert fields["general.name"] == "merged"


def test_a_hub_model_is_planned_from_its_headers_then_downloaded_and_exported(hub_env, tiny_models, tmp_path):
    from guiapp.gguf.export import dry_run

    hub_env.server.add_model("someone/tiny-qwen", tiny_models["qwen2"])
    report = dry_run("someone/tiny-qwen", tmp_path / "tiny.gguf", "q8_0")
    assert report["architecture"] == "qwen2" and not report["header_exact"]
    assert not any(hub_env.cache_dir.rglob("*.safetensors"))  # the plan downloaded nothing
    result = export_gguf("someone/tiny-qwen", tmp_path / "tiny.gguf", "q8_0")
    assert abs(result.bytes / report["predicted_bytes"] - 1) < 0.05


def test_retrying_an_export_under_the_suggested_name_rebuilds_the_job(tiny_models, tmp_path):
    from guiapp.jobs.gguf_export import gguf_export_job
    from guiapp.jobs.runner import run_job
    from guiapp.jobs.specs import retry

    (tmp_path / "model.gguf").write_bytes(b"mine")
    job = gguf_export_job(str(tiny_models["qwen2"]), tmp_path / "model.gguf", "q8_0")
    failed = run_job(job)
    assert isinstance(failed.error, OutputError)
    again = run_job(retry(job.kind, job.spec, failed.error.remedy.changes))
    assert again.error is None and again.summary["file"] == str(tmp_path / "model-2.gguf")
    assert (tmp_path / "model.gguf").read_bytes() == b"mine"
