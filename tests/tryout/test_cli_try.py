"""`mergesmith try` and `mergesmith perplexity` on models the tests build."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from guiapp.__main__ import main
from guiapp.cli.process import EXIT_FAILED, EXIT_OK
from tests.tryout.models import SENTENCES


def test_try_prints_each_models_text(causal_fp32, causal_fp16, probe_in_cache, capsys):
    code = main(["try", str(causal_fp32), str(causal_fp16), "--prompt", "the cat sat", "--max-new-tokens", "6"])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    first, second = out.split(f"=== {causal_fp16} ===")
    assert f"=== {causal_fp32} ===" in first and first.split("===")[-1].strip() and second.strip()


def test_perplexity_json_has_one_object_per_model(causal_fp32, causal_bf16, bf16_adapter, probe_in_cache, tmp_path,
                                                  capsys):
    text = tmp_path / "text.txt"
    text.write_text(" ".join(SENTENCES))
    adapted = f"{causal_bf16}+{bf16_adapter}"
    code = main(["perplexity", str(causal_fp32), adapted, "--text", str(text), "--json"])
    lines = capsys.readouterr().out.splitlines()
    assert code == EXIT_OK
    objects = [json.loads(line) for line in lines]
    assert [o["model"] for o in objects] == [str(causal_fp32), adapted]
    assert all(math.isfinite(o["perplexity"]) and o["perplexity"] > 1 for o in objects)


def test_unknown_architecture_is_explained_not_a_traceback(causal_fp32, probe_in_cache, tmp_path, capsys):
    folder = tmp_path / "strange"
    folder.mkdir()
    for file in causal_fp32.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="frobnicator", architectures=["FrobnicatorForCausalLM"])
    (folder / "config.json").write_text(json.dumps(config))
    code = main(["try", str(folder), "--prompt", "hello"])
    err = " ".join(capsys.readouterr().err.split())  # the explanation is wrapped to the terminal's width
    assert code == EXIT_FAILED
    assert "transformers does not know this architecture" in err and "Traceback" not in err


def test_try_samples_with_the_temperature_and_top_p_given(causal_fp32, probe_in_cache, capsys):
    import torch

    from guiapp.inference.running import GenerationSettings, generate, load_model, resolve_sources

    code = main(["try", str(causal_fp32), "--prompt", "the cat sat", "--max-new-tokens", "6", "--sample", "--seed",
                 "5", "--temperature", "1.5", "--top-p", "0.5"])
    assert code == EXIT_OK
    settings = GenerationSettings(max_new_tokens=6, sample=True, seed=5, temperature=1.5, top_p=0.5)
    expected = generate(load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu"), "the cat sat", settings)
    assert capsys.readouterr().out.split("===")[-1].strip() == expected.text.strip()
    assert main(["try", str(causal_fp32), "--prompt", "x", "--sample", "--top-p", "1.5"]) == EXIT_FAILED
    assert "Top-p must be above 0 and at most 1" in capsys.readouterr().err


def test_the_sample_merge_can_be_tried(probe_in_cache, tmp_path, capsys):
    """The first thing a new user merges (the window's "Try it with sample models") opens on the Try page."""
    assert main(["demo", "--out", str(tmp_path)]) == EXIT_OK
    merged = tmp_path / "merged"
    capsys.readouterr()
    code = main(["try", str(merged), "--prompt", "Hello", "--max-new-tokens", "4"])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    assert captured.out.split(f"=== {merged} ===")[1].strip()


def test_a_folder_without_a_tokenizer_says_so_not_that_it_is_corrupt(causal_fp32, probe_in_cache, tmp_path, capsys):
    folder = tmp_path / "weights-only"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((causal_fp32 / name).read_bytes())
    code = main(["try", str(folder), "--prompt", "hello"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == EXIT_FAILED
    assert "has no tokenizer" in err and "holds only weights" in err and "corrupt" not in err, err


def test_an_empty_prompt_starts_from_the_start_token(probe_in_cache, tmp_path, capsys):
    """The sample tokenizer adds no start token: an empty prompt was zero tokens and a reshape error."""
    assert main(["demo", "--out", str(tmp_path)]) == EXIT_OK
    capsys.readouterr()
    code = main(["try", str(tmp_path / "merged"), "--prompt", "", "--max-new-tokens", "3"])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err


@pytest.mark.parametrize("tokens", ["0", "-3"])
def test_no_new_tokens_is_a_setting_problem_not_an_unrecognised_error(causal_fp32, probe_in_cache, capsys, tokens):
    code = main(["try", str(causal_fp32), "--prompt", "hi", "--max-new-tokens", tokens])
    err = " ".join(capsys.readouterr().err.split())
    assert code == EXIT_FAILED
    assert f"The number of new tokens must be at least 1 (got {tokens})" in err and "not recognise" not in err


@pytest.mark.parametrize("scale", ["nan", "inf", "-inf", "half"])
def test_an_adapter_scale_that_is_not_a_finite_number_is_refused_first(scale, capsys):
    from guiapp.errors import SettingsError
    from guiapp.lora.apply import ApplySettings

    with pytest.raises(SystemExit) as stopped:
        main(["apply-lora", "--base", "b", "--adapter", "a", "--out", "o", f"--scale={scale}", "--dry-run"])
    assert stopped.value.code == 2 and "is not a number" in capsys.readouterr().err
    if scale != "half":  # the window builds the settings itself
        with pytest.raises(SettingsError, match="scale must be a finite number") as caught:
            ApplySettings(base="b", adapter="a", out=Path("o"), scale=float(scale))
        assert caught.value.key == ("scale",)


def test_a_family_the_app_download_does_not_carry_is_said_as_such(causal_fp32):
    """The bundle carries transformers' code for the common families only; the others fail to import by name."""
    from guiapp.inference.running import _unsupported, resolve_sources

    source = resolve_sources([str(causal_fp32)])[0]
    missing = ModuleNotFoundError("No module named 'transformers.models.frobnicator'")
    error = _unsupported(source, {"architectures": ["FrobnicatorForCausalLM"]}, missing)
    assert "cannot be tried in this copy of Mergesmith" in error.message and "install Mergesmith with" in error.hint
