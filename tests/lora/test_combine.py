"""`mergesmith lora-merge` against PEFT's own add_weighted_adapter, tensor by tensor, on adapters PEFT made."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from guiapp.__main__ import main
from guiapp.cli.process import EXIT_FAILED, EXIT_OK
from guiapp.errors import CheckpointError, IncompatibleModelsError, SettingsError
from guiapp.lora.combine import CombineSettings, combine_adapters
from tests.lora.helpers import adapter_config, adapter_tensors
from tests.lora.peft_adapters import adapter_state, logits, peft_weighted, write_peft_adapter
from tests.tryout.models import write_causal

TOKENS = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_causal(tmp_path_factory.mktemp("combine") / "base", torch.float32, seed=11)


@pytest.fixture(scope="module")
def adapters(base: Path) -> dict[str, Path]:
    """Rank 4 (q, v, down), rank 4 with rsLoRA on other targets (q, o), rank 8 (q, v)."""
    return {
        "r4": write_peft_adapter(base, base.parent / "r4", seed=1),
        "r4_other": write_peft_adapter(base, base.parent / "r4-other", seed=2, lora_alpha=16, use_rslora=True,
                                       target_modules=["q_proj", "o_proj"]),
        "r8": write_peft_adapter(base, base.parent / "r8", seed=3, r=8, target_modules=["q_proj", "v_proj"]),
    }


def _fingerprint(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


CASES = [
    ("linear", ["r4", "r4_other"], [0.7, -0.4], {}),
    ("ties", ["r4", "r4_other"], [1.0, 0.6], {"density": 0.5}),
    ("cat", ["r4", "r8"], [0.5, 1.5], {}),
    ("svd", ["r4", "r8"], [1.0, -0.5], {"svd_rank": 6}),
    ("svd", ["r4_other", "r8", "r4"], [0.3, 0.8, 1.2], {}),
]


@pytest.mark.parametrize(("method", "names", "weights", "options"), CASES)
def test_the_result_is_peft_add_weighted_adapters_own(method, names, weights, options, base, adapters, tmp_path):
    folders = [adapters[name] for name in names]
    before = [_fingerprint(folder) for folder in folders]
    out = tmp_path / "merged"
    command = ["lora-merge", *map(str, folders), "--weights", *map(str, weights), "--method", method,
               "--out", str(out)]
    if "svd_rank" in options:
        command += ["--rank", str(options["svd_rank"])]
    if "density" in options:
        command += ["--density", str(options["density"])]
    assert main(command) == EXIT_OK
    assert [_fingerprint(folder) for folder in folders] == before

    reference = peft_weighted(base, folders, weights, method, **options)
    expected, ours = adapter_state(reference, "merged"), adapter_tensors(out)
    assert set(ours) == set(expected)
    worst = max((ours[key] - expected[key]).abs().max().item() for key in expected)
    print(f"{method}: largest difference from PEFT's add_weighted_adapter {worst:.3g}")
    tolerance = 1e-5 if method == "svd" else 0.0  # svd: the summed update is rounded in another order
    assert all(torch.allclose(ours[key], expected[key], rtol=0, atol=tolerance) for key in expected)

    config = adapter_config(out)
    peft_config = reference.peft_config["merged"]
    assert (config["r"], config["lora_alpha"]) == (peft_config.r, peft_config.lora_alpha)
    assert set(config["target_modules"]) == set(peft_config.target_modules)

    import peft

    loaded = peft.PeftModel.from_pretrained(reference.get_base_model(), out, adapter_name="ours")
    loaded.set_adapter("ours")
    ours_logits = logits(loaded, TOKENS)
    loaded.set_adapter("merged")
    assert torch.allclose(ours_logits, logits(loaded, TOKENS), atol=1e-5)


def test_linear_with_unequal_ranks_is_refused_as_peft_refuses_it(adapters, tmp_path):
    with pytest.raises(IncompatibleModelsError, match="same rank only") as caught:
        combine_adapters(CombineSettings((str(adapters["r4"]), str(adapters["r8"])), (1, 1), "linear",
                                         tmp_path / "out"))
    assert "--method cat" in caught.value.hint
    assert not (tmp_path / "out").exists()


def test_adapters_for_different_models_are_refused(adapters, tmp_path):
    other = write_causal(tmp_path / "wide", torch.float32, seed=1)
    config = json.loads((other / "config.json").read_text())
    config["intermediate_size"] = 96
    (other / "config.json").write_text(json.dumps(config))
    from guiapp.checkpoints.samples import LlamaShape, write_llama

    write_llama(other, LlamaShape(hidden=64, intermediate=96, layers=2, heads=4, kv_heads=2, vocab=64), seed=1)
    foreign = write_peft_adapter(other, tmp_path / "foreign", seed=4)
    with pytest.raises(IncompatibleModelsError, match="different shapes.*made for different models"):
        combine_adapters(CombineSettings((str(adapters["r4"]), str(foreign)), (1, 1), "cat", tmp_path / "out"))


def test_a_rank_the_module_cannot_hold_is_refused(adapters, tmp_path):
    with pytest.raises(IncompatibleModelsError, match="holds at most 32 directions: rank 40"):
        combine_adapters(CombineSettings((str(adapters["r4"]), str(adapters["r8"])), (1, 1), "svd",
                                         tmp_path / "out", rank=40))


def test_settings_peft_would_refuse_or_ignore_are_refused(adapters, tmp_path):
    pair = (str(adapters["r4"]), str(adapters["r4_other"]))
    with pytest.raises(SettingsError, match="ties needs"):
        CombineSettings(pair, (1, 1), "ties", tmp_path / "out")
    with pytest.raises(SettingsError, match="one weight"):
        CombineSettings(pair, (1,), "linear", tmp_path / "out")
    with pytest.raises(SettingsError, match="--rank sets the rank of an svd"):
        CombineSettings(pair, (1, 1), "cat", tmp_path / "out", rank=4)


def test_a_dora_adapter_or_a_model_folder_is_refused_with_the_reason(base, adapters, tmp_path, capsys):
    dora = write_peft_adapter(base, tmp_path / "dora", seed=5, use_dora=True)
    with pytest.raises(CheckpointError, match="DoRA adapter"):
        combine_adapters(CombineSettings((str(adapters["r4"]), str(dora)), (1, 1), "cat", tmp_path / "out"))
    code = main(["lora-merge", str(adapters["r4"]), str(base), "--weights", "1", "1", "--method", "cat",
                 "--out", str(tmp_path / "out")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == EXIT_FAILED and "not a PEFT adapter folder (it holds a full model)" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_json_report_names_each_modules_adapters(adapters, tmp_path, capsys):
    out = tmp_path / "merged"
    assert main(["lora-merge", str(adapters["r4"]), str(adapters["r4_other"]), "--weights", "1", "1",
                 "--method", "cat", "--out", str(out), "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    by_module = {m["module"]: m for m in report["modules"]}
    assert report["rank"] == 8 and report["output"] == str(out)
    assert len(by_module["model.layers.0.self_attn.q_proj"]["adapters"]) == 2
    assert len(by_module["model.layers.0.self_attn.o_proj"]["adapters"]) == 1
    card = (out / "README.md").read_text()
    assert str(adapters["r4"]) in card and "cat method" in card


def test_the_toolbox_jobs_are_rebuilt_from_their_spec(tmp_path):
    from guiapp.jobs.specs import combine_job, job_from_spec, resize_job

    for job in (resize_job("a", tmp_path / "o", energy=0.9),
                combine_job(["a", "b"], [1.0, 0.5], "ties", tmp_path / "o", density=0.4)):
        rebuilt = job_from_spec(job.kind, job.spec)
        assert (rebuilt.kind, rebuilt.spec) == (job.kind, job.spec)
