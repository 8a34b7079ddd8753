"""Every job reads a quantized model as its dequantized weights: merge, extract-lora, perplexity, the
compatibility check; and a quantized model that disagrees with its settings is refused before any output."""

from __future__ import annotations

import json

from safetensors.torch import load_file, save_file

from guiapp.__main__ import main
from guiapp.cli.process import EXIT_OK
from tests.tryout.models import SENTENCES


def _recipe(tmp_path, text: str):
    path = tmp_path / f"recipe-{abs(hash(text))}.yml"
    path.write_text(text)
    return path


def _same_tensors(left, right):
    written, expected = load_file(left / "model.safetensors"), load_file(right / "model.safetensors")
    assert written.keys() == expected.keys()
    assert all(written[name].equal(expected[name]) for name in expected), "the outputs differ"


def test_a_merge_reads_a_4bit_input_as_bitsandbytes_dequantizes_it_and_says_so(qlora, tmp_path, capsys):
    base, _, reference, original = qlora
    for model, out in ((base, "out"), (reference, "expected")):
        recipe = _recipe(tmp_path, f"merge_method: linear\ndtype: bfloat16\nmodels:\n  - model: {model}\n"
                                   f"    parameters: {{weight: 0.5}}\n  - model: {original}\n"
                                   "    parameters: {weight: 0.5}\n")
        assert main(["merge", str(recipe), str(tmp_path / out)]) == EXIT_OK
    _same_tensors(tmp_path / "out", tmp_path / "expected")
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"- {base} (read dequantized from 4-bit (nf4, double quantized) to bfloat16)" in card
    assert "quantization_config" not in json.loads((tmp_path / "out" / "config.json").read_text())
    assert "quantisation noise" not in capsys.readouterr().err  # no task vectors in a linear merge


def test_task_vectors_taken_from_a_quantized_base_are_warned_about(qlora, tmp_path, capsys):
    base, _, _, original = qlora
    recipe = _recipe(tmp_path, f"merge_method: task_arithmetic\nbase_model: {base}\ndtype: bfloat16\nmodels:\n"
                               f"  - model: {original}\n    parameters: {{weight: 1.0}}\n")
    assert main(["merge", str(recipe), str(tmp_path / "out"), "--dry-run"]) == EXIT_OK
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())  # the warning is wrapped to the terminal's width
    assert f"{base} (4-bit (nf4, double quantized)) is quantized" in said and "includes the quantisation noise" in said


def test_extract_lora_from_a_quantized_fine_tune_equals_extracting_from_its_dequantized_copy(qlora, tmp_path):
    base, _, reference, original = qlora
    for model, out in ((base, "adapter"), (reference, "expected")):
        assert main(["extract-lora", "--base", str(original), "--model", str(model), "--out", str(tmp_path / out),
                     "--rank", "4", "--solver", "exact"]) == EXIT_OK
    written = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    expected = load_file(tmp_path / "expected" / "adapter_model.safetensors")
    assert written.keys() == expected.keys() and all(written[n].equal(expected[n]) for n in expected)


def test_perplexity_of_a_4bit_model_equals_its_dequantized_copys(qlora, probe_in_cache, tmp_path, capsys):
    base, _, reference, _ = qlora
    text = tmp_path / "text.txt"
    text.write_text(" ".join(SENTENCES))
    assert main(["perplexity", str(base), str(reference), "--text", str(text), "--json", "--dtype", "bfloat16"]) == EXIT_OK
    first, second = (json.loads(line)["perplexity"] for line in capsys.readouterr().out.splitlines())
    assert first == second


def test_a_broken_quantized_input_is_refused_before_the_merge_writes_anything(qlora, tmp_path, capsys):
    base, _, _, original = qlora
    broken = tmp_path / "broken"
    broken.mkdir()
    for file in base.iterdir():
        (broken / file.name).write_bytes(file.read_bytes())
    stored = load_file(broken / "model.safetensors")
    del stored["model.layers.1.mlp.up_proj.weight.absmax"]
    save_file(stored, broken / "model.safetensors")
    recipe = _recipe(tmp_path, f"merge_method: linear\nmodels:\n  - model: {broken}\n    parameters: {{weight: 0.5}}\n"
                               f"  - model: {original}\n    parameters: {{weight: 0.5}}\n")
    assert main(["merge", str(recipe), str(tmp_path / "out")]) != EXIT_OK
    err = " ".join(capsys.readouterr().err.split())
    assert '"model.layers.1.mlp.up_proj.weight" has no absmax' in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
