"""`mergesmith moe` through the real CLI: the dry run's plan and estimate, a run's summary, a refusal's message, and
nothing left behind that looks like a finished model."""

from __future__ import annotations

import json

import torch

from guiapp.__main__ import main
from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.jobs.specs import job_from_spec
from tests.faults.harness import leftovers
from tests.moe.helpers import expert, write_config


def _config(models, folder, **changes):
    return write_config(folder, {"base_model": str(models["base"]), "gate_mode": "cheap_embed",
                                 "experts": [expert(models, n) for n in ("e0", "e1")], **changes})


def test_dry_run_prints_the_plan_and_estimate_and_writes_nothing(moe_models, tmp_path, capsys):
    path = _config(moe_models, tmp_path)
    assert main(["moe", str(path), str(tmp_path / "moe"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "Architecture:  Mixtral, 2 of 2 experts per token" in printed
    assert "Routing:       cheap_embed: by the words of each expert's prompts" in printed
    assert "Estimate:" in printed and "Disk:" in printed and "Nothing was written" in printed
    assert main(["moe", str(path), str(tmp_path / "moe"), "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["architecture"], plan["tensors"], plan["fits"]) == ("Mixtral", 21, True)
    assert plan["output_bytes"] < plan["input_bytes"]  # two experts of three models' MLPs, the base's rest once
    assert not (tmp_path / "moe").exists()


def test_a_run_prints_its_summary_and_leaves_a_complete_model(moe_models, tmp_path, capsys):
    path = _config(moe_models, tmp_path, dtype="bfloat16")
    assert main(["moe", str(path), str(tmp_path / "moe"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["architecture"], summary["experts"], summary["tensors"]) == ("Mixtral", 2, 21)
    files = {p.name for p in (tmp_path / "moe").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "mergekit_moe_config.yml", "README.md"} <= files
    assert (tmp_path / "moe" / "mergekit_moe_config.yml").read_text() == path.read_text()
    assert leftovers(tmp_path) == []


def test_an_expert_that_is_no_fine_tune_of_the_base_is_refused_with_the_reason(moe_models, tmp_path, capsys):
    stranger = write_llama(tmp_path / "stranger", LlamaShape(hidden=48, intermediate=64, layers=2, vocab=23),
                           dtype=torch.float32)
    path = write_config(tmp_path, {"base_model": str(moe_models["base"]), "gate_mode": "random",
                                   "experts": [{"source_model": str(moe_models["e0"])},
                                               {"source_model": str(stranger)}]})
    assert main(["moe", str(path), str(tmp_path / "moe")]) == 1
    printed = " ".join(capsys.readouterr().err.split())
    assert "do not all fit the base model" in printed and "stranger" in printed
    assert "What to do:" in printed and "Traceback" not in printed
    assert not (tmp_path / "moe").exists() and leftovers(tmp_path) == []


def test_the_job_is_rebuilt_from_its_recorded_settings(moe_models, tmp_path):
    """The Jobs page's Retry and the history rebuild a job from the spec it recorded."""
    path = _config(moe_models, tmp_path)
    job = job_from_spec("moe", {"config_path": str(path), "out": str(tmp_path / "moe"), "device": "cpu", "seed": 3,
                                "overwrite": False, "max_shard_size": "5GB", "force": False})
    assert job.kind == "moe" and job.spec["seed"] == 3 and job.title.endswith("moe")


def test_a_failure_midway_leaves_nothing_that_looks_finished(moe_models, tmp_path, capsys):
    """An expert scaled past float32's range fails once its tensors are written: the staging folder goes."""
    path = write_config(tmp_path, {"base_model": str(moe_models["base"]), "gate_mode": "random",
                                   "experts": [{"source_model": str(moe_models["e0"])},
                                               {"source_model": str(moe_models["e1"]), "residual_scale": 1e39}]})
    assert main(["moe", str(path), str(tmp_path / "moe")]) == 1
    printed = " ".join(capsys.readouterr().err.split())  # as read, whatever the terminal's width wrapped
    assert "NaN or infinite" in printed and "residual_scale" in printed
    assert not (tmp_path / "moe").exists() and leftovers(tmp_path) == []


def test_a_base_without_a_tokenizer_is_refused_before_anything_is_read(moe_models, tmp_path, capsys):
    import shutil

    bare = tmp_path / "bare-base"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(moe_models["base"] / name, bare / name)
    path = write_config(tmp_path, {"base_model": str(bare), "gate_mode": "cheap_embed",
                                   "experts": [expert(moe_models, n) for n in ("e0", "e1")]})
    assert main(["moe", str(path), str(tmp_path / "moe"), "--dry-run"]) == 1
    printed = " ".join(capsys.readouterr().err.split())
    assert "has no tokenizer" in printed and "gate_mode: random" in printed
