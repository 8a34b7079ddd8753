"""A quantized model says what it is: `hub info`, the window's model details (its fit), and the jobs' headers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from guiapp.checkpoints.sources import read_headers
from guiapp.hub.references import ModelRef
from guiapp.jobs.library import header_facts
from tests.quantized.helpers import bnb_4bit, bnb_4bit_settings, quantized_copy
from tests.quantized.test_formats import _fp8_blocks
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - the test Hub

RUNNER = ("import json, sys\nfrom guiapp.__main__ import main\ncode = main(sys.argv[1:])\n"
          "print('@@' + json.dumps({'code': code, 'torch': 'torch' in sys.modules}), file=sys.stderr)\n")


def test_the_model_details_say_how_it_is_quantized_and_count_the_dequantized_size(llama_base, tmp_path):
    pytest.importorskip("bitsandbytes")
    folder = quantized_copy(llama_base, tmp_path / "q", bnb_4bit("nf4", True), bnb_4bit_settings("nf4", True))
    largest, summary = header_facts(str(folder))
    on_disk = (folder / "model.safetensors").stat().st_size
    assert summary.startswith("4-bit (nf4, double quantized), dequantized to bfloat16 on read: ")
    assert summary.endswith(" as bfloat16") and " on disk, " in summary
    assert largest == 256 * 64 * 4  # the embedding (and head) in float32: dequantized shapes, not packed ones
    headers = read_headers(ModelRef.parse(str(folder)))
    assert headers.quantization.stored_bytes < on_disk < headers.quantization.dequantized_bytes
    assert "quantization_config" not in headers.config


def test_hub_info_names_the_quantization_without_loading_torch(llama_base, tmp_path, hub_env):  # noqa: F811
    folder = quantized_copy(llama_base, tmp_path / "fp8", _fp8_blocks(32), {"quant_method": "fp8",
                                                                             "weight_block_size": [32, 32]})
    hub_env.server.add_model("org/fp8", folder)
    done = subprocess.run([sys.executable, "-c", RUNNER, "hub", "info", "org/fp8"], capture_output=True, text=True,
                          env=hub_env.env, timeout=60)
    result = json.loads(done.stderr.rstrip("\n").split("\n")[-1].removeprefix("@@"))
    assert result == {"code": 0, "torch": False}, done.stderr
    assert "Quantized:     FP8 (32x32 blocks), read dequantized to bfloat16" in done.stdout
