"""QLoRA: an adapter trained on a bitsandbytes 4-bit base, applied to it and tried with it."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from guiapp.__main__ import main
from guiapp.cli.process import EXIT_OK


def test_apply_lora_on_a_4bit_base_writes_the_full_precision_model(qlora, tmp_path):
    base, adapter, reference, _ = qlora
    # One thread for both: the default follows the cores other programs leave free at each start, and a matrix
    # product split another way may round its last bit differently (the comparison is exact).
    assert main(["apply-lora", "--base", str(base), "--adapter", str(adapter), "--out", str(tmp_path / "out"),
                 "--threads", "1"]) == EXIT_OK
    assert main(["apply-lora", "--base", str(reference), "--adapter", str(adapter), "--out",
                 str(tmp_path / "expected"), "--threads", "1"]) == EXIT_OK
    written, expected = load_file(tmp_path / "out" / "model.safetensors"), load_file(tmp_path / "expected" / "model.safetensors")
    assert written.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(written[name], tensor, rtol=0, atol=0, msg=name)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "quantization_config" not in config and config["torch_dtype"] == "bfloat16"


def test_try_runs_a_qlora_adapter_on_its_4bit_base_in_bfloat16_on_the_cpu(qlora, probe_in_cache, capsys):
    base, adapter, reference, _ = qlora
    texts = []
    for model in (base, reference):  # the 4-bit base, and bitsandbytes' dequantization of it as a plain model
        code = main(["try", f"{model}+{adapter}", "--prompt", "the cat sat", "--max-new-tokens", "6",
                     "--dtype", "bfloat16"])
        captured = capsys.readouterr()
        assert "mat1 and mat2" not in captured.err
        assert code == EXIT_OK, captured.err
        texts.append(captured.out.split("===")[-1])
    assert texts[0] == texts[1]
