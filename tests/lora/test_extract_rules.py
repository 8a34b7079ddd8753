"""What goes into the adapter: unchanged modules, filters, embeddings policy, half-precision inputs, guards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from guiapp.__main__ import main
from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.errors import (
    CheckpointError,
    IncompatibleModelsError,
    JobCancelled,
    NonFiniteResultError,
    OutputError,
    SettingsError,
)
from guiapp.lora.apply import ApplySettings, apply_lora
from guiapp.lora.extract import ExtractionSettings, extract_lora
from guiapp.lora.lowrank import RankRule
from guiapp.progress import CancelToken, Progress
from tests.lora.helpers import adapter_config, adapter_report, adapter_tensors, extract, finetune, model_tensors

LLAMA_MODULES = 1 + 2 * 9 + 1 + 1  # embeddings, 2 layers × (7 linears + 2 norms), final norm, lm_head


def no_leftovers(parent: Path) -> bool:
    return not list(parent.glob(".*mergesmith-partial*"))


def test_unchanged_modules_are_skipped_and_counted(llama_base, tmp_path):
    tuned = finetune(llama_base, tmp_path / "tuned", only=r"self_attn\.(q|v)_proj", shift_1d=0.0)
    summary = extract(llama_base, tuned, tmp_path / "lora")
    config = adapter_config(Path(summary["output"]))
    assert config["target_modules"] == ["q_proj", "v_proj"]
    assert config["modules_to_save"] is None
    assert summary["unchanged_modules"] == LLAMA_MODULES - 4 and summary["lora_modules"] == 4
    assert len(adapter_tensors(Path(summary["output"]))) == 8


def test_targets_that_are_not_every_module_of_a_kind_are_named_in_full(llama_base, tmp_path):
    tuned = finetune(llama_base, tmp_path / "tuned", only=r"layers\.0\.self_attn\.q_proj", shift_1d=0.0)
    config = adapter_config(Path(extract(llama_base, tuned, tmp_path / "lora")["output"]))
    assert config["target_modules"] == ["model.layers.0.self_attn.q_proj"]


def test_identical_models_are_refused_by_name_and_nothing_is_left(llama_base, tmp_path):
    copy = shutil.copytree(llama_base, tmp_path / "copy")
    with pytest.raises(IncompatibleModelsError, match="identical") as caught:
        extract(llama_base, copy, tmp_path / "lora")
    assert str(copy) in str(caught.value) and str(llama_base) in str(caught.value)
    assert not (tmp_path / "lora").exists() and no_leftovers(tmp_path)


def test_changes_below_rounding_count_as_unchanged(llama_base, tmp_path):
    tuned = finetune(llama_base, tmp_path / "tuned", rank_of=lambda m: 1, scale=1e-9, shift_1d=0.0)
    with pytest.raises(IncompatibleModelsError, match="identical"):
        extract(llama_base, tuned, tmp_path / "lora")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_models_on_cpu_never_reach_a_half_svd(dtype, tmp_path, monkeypatch):
    base = write_llama(tmp_path / "base", dtype=dtype)
    tuned = finetune(base, tmp_path / "tuned", dtype=dtype)
    seen = []
    for name in ("svd", "qr"):
        original = getattr(torch.linalg, name)

        def checked(matrix, *args, _original=original, **kwargs):
            seen.append(matrix.dtype)
            return _original(matrix, *args, **kwargs)

        monkeypatch.setattr(torch.linalg, name, checked)
    summary = extract(base, tuned, tmp_path / "lora", RankRule("fixed", 8))
    assert seen and set(seen) <= {torch.float32}
    tensors = adapter_tensors(Path(summary["output"]))
    assert {t.dtype for t in tensors.values()} == {dtype}
    assert adapter_report(Path(summary["output"]))["totals"]["max_relative_error"] < 0.02  # storage rounding only
    apply_lora(ApplySettings(str(base), summary["output"], tmp_path / "full"))
    applied, expected = model_tensors(tmp_path / "full"), model_tensors(tuned)
    name = "model.layers.1.mlp.up_proj.weight"
    assert applied[name].dtype == dtype
    assert float((applied[name].float() - expected[name].float()).norm() / expected[name].float().norm()) < 0.01


def test_include_and_exclude_filter_modules_and_report_what_was_left_out(llama_base, llama_planted, tmp_path):
    summary = extract(llama_base, llama_planted, tmp_path / "lora", include=r"self_attn", exclude=r"k_proj")
    config = adapter_config(Path(summary["output"]))
    assert config["target_modules"] == ["o_proj", "q_proj", "v_proj"]
    report = adapter_report(Path(summary["output"]))
    assert "model.layers.0.self_attn.k_proj" in report["changed_but_excluded"]
    assert "model.layers.1.mlp.down_proj" in report["changed_but_excluded"]
    assert summary["warnings"] and "left out by the module filters" in summary["warnings"][0]  # the window's words
    assert "--include / --exclude" in report["warnings"][0]  # the report file, read beside the command line


def test_embeddings_can_be_skipped_and_say_so(llama_base, llama_planted, tmp_path):
    summary = extract(llama_base, llama_planted, tmp_path / "lora", embeddings="skip")
    report = adapter_report(Path(summary["output"]))
    assert set(report["changed_but_skipped"]) == {"model.embed_tokens", "lm_head"}
    assert "lm_head" not in adapter_config(Path(summary["output"]))["modules_to_save"]
    [warning] = summary["warnings"]
    assert "skipped" in warning and "--" not in warning, warning
    assert "(--embeddings skip)" in report["warnings"][0]


def test_cancelling_leaves_nothing(llama_base, llama_planted, tmp_path):
    token = CancelToken()
    steps = []

    def on_event(event):
        steps.append(event)
        if event.stage == "Extracting" and event.done == 3:
            token.cancel()

    with pytest.raises(JobCancelled):
        extract_lora(ExtractionSettings(str(llama_base), str(llama_planted), tmp_path / "lora"),
                     Progress(on_event=on_event, cancel=token))
    assert not (tmp_path / "lora").exists() and no_leftovers(tmp_path)


# --- guards, all found before any tensor is compared ---------------------------------------------------------


def refused_before_work(base: Path, model: Path, out: Path, error: type, match: str, **options) -> Exception:
    stages: list[str] = []
    progress = Progress(on_event=lambda event: stages.append(event.stage))
    with pytest.raises(error, match=match) as caught:
        extract_lora(ExtractionSettings(str(base), str(model), out, **options), progress)
    assert "Extracting" not in stages and not out.exists()
    return caught.value


def test_unrelated_shapes_are_refused(llama_base, tmp_path):
    other = write_llama(tmp_path / "other", LlamaShape(hidden=32, intermediate=64), dtype=torch.float32)
    error = refused_before_work(llama_base, other, tmp_path / "lora", IncompatibleModelsError, "other shapes")
    assert "the base the fine-tune was made from" in error.hint


def test_a_different_vocabulary_is_explained(llama_base, tmp_path):
    other = write_llama(tmp_path / "bigger", LlamaShape(vocab=260), dtype=torch.float32)
    error = refused_before_work(llama_base, other, tmp_path / "lora", IncompatibleModelsError, "vocabulary of 260")
    assert "resize_token_embeddings(260)" in error.hint


def test_a_different_architecture_in_config_is_refused(llama_base, llama_planted, tmp_path):
    other = shutil.copytree(llama_planted, tmp_path / "mistral")
    config = json.loads((other / "config.json").read_text())
    config.update(model_type="mistral", architectures=["MistralForCausalLM"])
    (other / "config.json").write_text(json.dumps(config))
    refused_before_work(llama_base, other, tmp_path / "lora", IncompatibleModelsError, "MistralForCausalLM model")


def test_different_tensor_sets_are_refused(llama_base, tmp_path):
    tied = write_llama(tmp_path / "tied", dtype=torch.float32, tie_embeddings=True)
    refused_before_work(llama_base, tied, tmp_path / "lora", IncompatibleModelsError, "lacks 1 tensors")


@pytest.mark.parametrize(
    ("options", "match"),
    [({"include": "(unclosed"}, "regular expression"), ({"solver": "magic"}, "solver"),
     ({"embeddings": "drop"}, "embeddings"), ({"compute_dtype": "bfloat16"}, "float32 or float64"),
     ({"rule": RankRule("energy", 2.0)}, "fraction")],
)
def test_bad_settings_are_refused(llama_base, llama_planted, tmp_path, options, match):
    refused_before_work(llama_base, llama_planted, tmp_path / "lora", SettingsError, match, **options)


def test_an_existing_output_is_not_overwritten_unless_asked(llama_base, llama_planted, tmp_path):
    (tmp_path / "lora").mkdir()
    with pytest.raises(OutputError):
        extract(llama_base, llama_planted, tmp_path / "lora")
    extract(llama_base, llama_planted, tmp_path / "lora", overwrite=True)
    assert (tmp_path / "lora" / "adapter_config.json").is_file()


# --- apply guards --------------------------------------------------------------------------------------------


def test_an_adapter_for_another_base_is_refused(llama_base, tmp_path):
    small = write_llama(tmp_path / "small", LlamaShape(hidden=32, intermediate=64), dtype=torch.float32)
    small_tuned = finetune(small, tmp_path / "small_tuned", shift_1d=0.0)
    adapter = extract(small, small_tuned, tmp_path / "lora", embeddings="skip")["output"]
    with pytest.raises(IncompatibleModelsError, match="does not fit") as caught:
        apply_lora(ApplySettings(str(llama_base), adapter, tmp_path / "full"))
    assert str(small.resolve()) in str(caught.value)  # names the base it was made for
    assert not (tmp_path / "full").exists()


def test_kohya_adapters_are_recognised(llama_base, tmp_path):
    folder = tmp_path / "kohya"
    folder.mkdir()
    save_file({"lora_unet_down_blocks_0_attn.lora_down.weight": torch.zeros(4, 8),
               "lora_unet_down_blocks_0_attn.lora_up.weight": torch.zeros(8, 4)}, folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 4}))
    with pytest.raises(CheckpointError, match="kohya"):
        apply_lora(ApplySettings(str(llama_base), str(folder), tmp_path / "full"))


def test_a_folder_without_adapter_config_is_not_an_adapter(llama_base, llama_planted, tmp_path):
    with pytest.raises(CheckpointError, match="not a PEFT adapter"):
        apply_lora(ApplySettings(str(llama_base), str(llama_planted), tmp_path / "full"))


def test_a_missing_adapter_folder_is_called_an_adapter(llama_base, tmp_path):
    """apply-lora with a mistyped adapter path said "The model folder … does not exist": which one?"""
    missing = tmp_path / "no-such-adapter"
    with pytest.raises(CheckpointError, match=r"^The adapter folder .*no-such-adapter does not exist"):
        apply_lora(ApplySettings(str(llama_base), str(missing), tmp_path / "full"))
    recipe = f"merge_method: linear\nmodels:\n  - model: {llama_base}+{missing}\n    parameters: {{weight: 1}}\n"
    (tmp_path / "recipe.yml").write_text(recipe)
    from guiapp.merging.merge import MergeSettings, run_merge
    from guiapp.merging.recipe import load_recipe

    with pytest.raises(CheckpointError, match=r"^The adapter folder .*no-such-adapter does not exist"):
        run_merge(load_recipe(tmp_path / "recipe.yml"), MergeSettings(tmp_path / "merged"))
    assert not (tmp_path / "full").exists() and not (tmp_path / "merged").exists()


def test_an_adapter_that_changes_nothing_is_refused(llama_base, tmp_path):
    tuned = finetune(llama_base, tmp_path / "tuned", only=r"q_proj", shift_1d=0.0)
    adapter = Path(extract(llama_base, tuned, tmp_path / "lora")["output"])
    tensors = {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in adapter_tensors(adapter).items()}
    save_file(tensors, adapter / "adapter_model.safetensors")
    with pytest.raises(IncompatibleModelsError, match="changes nothing"):
        apply_lora(ApplySettings(str(llama_base), str(adapter), tmp_path / "full"))


# --- the command line ----------------------------------------------------------------------------------------


def test_cli_extract_then_apply(llama_base, llama_planted, tmp_path, capsys):
    code = main(["extract-lora", "--base", str(llama_base), "--model", str(llama_planted), "--out",
                 str(tmp_path / "lora"), "--energy", "0.999", "--max-rank", "6", "--dtype", "bfloat16"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Mean retained energy" in out and "Worst modules" in out and "MB" in out
    assert adapter_config(tmp_path / "lora")["r"] == 4
    assert {t.dtype for t in adapter_tensors(tmp_path / "lora").values()} == {torch.bfloat16}
    code = main(["apply-lora", "--base", str(llama_base), "--adapter", str(tmp_path / "lora"), "--out",
                 str(tmp_path / "full"), "--scale", "1.0"])
    assert code == 0 and "changed by the adapter" in capsys.readouterr().out


def test_cli_identical_models_fail_with_an_explanation(llama_base, tmp_path, capsys):
    code = main(["extract-lora", "--base", str(llama_base), "--model", str(llama_base), "--out", str(tmp_path / "x")])
    assert code == 1 and "identical" in capsys.readouterr().err


def test_cli_rank_modes_are_exclusive(llama_base, tmp_path):
    with pytest.raises(SystemExit) as caught:
        main(["extract-lora", "--base", "a", "--model", "b", "--out", "c", "--rank", "4", "--energy", "0.9"])
    assert caught.value.code == 2


def test_tensors_compared_in_blocks_give_the_same_adapter(llama_base, llama_planted, tmp_path, monkeypatch):
    from guiapp.lora import extract as lora_extract  # noqa: PLC0415
    from guiapp.system.threads import ThreadPolicy  # noqa: PLC0415

    # One thread for both: the decompositions' sums come out in other bits with another thread count, and the
    # policy gives fewer threads when the machine is busy (this compared two runs under different loads).
    whole = adapter_tensors(Path(extract(llama_base, llama_planted, tmp_path / "whole",
                                         threads=ThreadPolicy(limit=1))["output"]))
    monkeypatch.setattr(lora_extract, "_COMPARE_BLOCK", 100)  # embeddings and norms now span many blocks
    blocks = adapter_tensors(Path(extract(llama_base, llama_planted, tmp_path / "blocks",
                                          threads=ThreadPolicy(limit=1))["output"]))
    assert whole.keys() == blocks.keys() and all(torch.equal(whole[k], blocks[k]) for k in whole)


def test_a_model_with_nan_is_refused_by_tensor_name(llama_base, tmp_path):
    tensors = model_tensors(llama_base)
    tensors["model.embed_tokens.weight"][3, 5] = float("nan")
    broken = tmp_path / "broken"
    shutil.copytree(llama_base, broken)
    save_file(tensors, broken / "model.safetensors")
    with pytest.raises(NonFiniteResultError, match="model.embed_tokens.weight"):
        extract(llama_base, broken, tmp_path / "lora")
    assert not (tmp_path / "lora").exists() and no_leftovers(tmp_path)
