"""bitsandbytes checkpoints read as their dequantized weights, checked against bitsandbytes' own dequantizers."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from guiapp.checkpoints.reading import open_checkpoint
from guiapp.errors import QuantizedCheckpointError
from tests.quantized.helpers import BNB_8BIT_SETTINGS, bnb_4bit, bnb_4bit_settings, bnb_8bit, quantized_copy
from tests.support.lazy_import import LazyModule

F = LazyModule("bitsandbytes.functional")


@pytest.mark.parametrize(("quant_type", "double"), [("nf4", True), ("nf4", False), ("fp4", True), ("fp4", False)])
def test_a_4bit_model_reads_as_bitsandbytes_dequantizes_it(llama_base, tmp_path, quant_type, double):
    folder = quantized_copy(llama_base, tmp_path / "q", bnb_4bit(quant_type, double), bnb_4bit_settings(quant_type, double))
    stored = load_file(folder / "model.safetensors")
    name = "model.layers.0.mlp.down_proj.weight"
    state = F.QuantState.from_dict({k.removeprefix(name + "."): v for k, v in stored.items()
                                    if k.startswith(name + ".")}, device=torch.device("cpu"))
    expected = F.dequantize_4bit(stored[name], state)
    with open_checkpoint(folder) as checkpoint, open_checkpoint(llama_base) as original:
        assert checkpoint.tensors.keys() == original.tensors.keys()  # no side tensors, logical names only
        assert checkpoint.tensors[name].shape == original.tensors[name].shape
        weight = checkpoint.read(name)
        assert weight.dtype == expected.dtype and weight.shape == expected.shape
        torch.testing.assert_close(weight, expected, rtol=0, atol=0)
        assert "quantization_config" not in checkpoint.config
        assert checkpoint.quantized.description.startswith(f"4-bit ({quant_type}")
        torch.testing.assert_close(checkpoint.read_rows(name, range(3, 7)), expected[3:7], rtol=0, atol=0)



def test_rows_that_cross_the_edges_of_double_quantized_scale_blocks_read_as_bitsandbytes_dequantizes_them(tmp_path):
    # 320 columns are 5 blocks of 64 a row; the absmax of every 256 blocks share one nested scale, so the nested
    # blocks change inside rows 51 and 102: runs of rows starting and ending on either side of those edges.
    weight = torch.randn(160, 320, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    name = "model.layers.0.mlp.down_proj.weight"
    save_file({n: t.contiguous() for n, t in bnb_4bit()(name, weight).items()}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "bfloat16",
                                                      "quantization_config": bnb_4bit_settings()}))
    stored = load_file(tmp_path / "model.safetensors")
    state = F.QuantState.from_dict({k.removeprefix(name + "."): v for k, v in stored.items()
                                    if k.startswith(name + ".")}, device=torch.device("cpu"))
    expected = F.dequantize_4bit(stored[name], state)
    with open_checkpoint(tmp_path) as checkpoint:
        for rows in (range(0, 160), range(50, 53), range(51, 52), range(52, 103), range(101, 160), range(7, 7)):
            assert torch.equal(checkpoint.read_rows(name, rows), expected[rows.start : rows.stop]), rows


def test_an_8bit_model_reads_as_bitsandbytes_dequantizes_it(llama_base, tmp_path):
    folder = quantized_copy(llama_base, tmp_path / "q", bnb_8bit, BNB_8BIT_SETTINGS)
    stored = load_file(folder / "model.safetensors")
    module = "model.layers.1.self_attn.q_proj"
    expected = F.int8_vectorwise_dequant(stored[f"{module}.weight"], stored[f"{module}.SCB"])
    with open_checkpoint(folder) as checkpoint, open_checkpoint(llama_base) as original:
        assert checkpoint.tensors.keys() == original.tensors.keys()
        weight = checkpoint.read(f"{module}.weight")
        assert weight.dtype == torch.bfloat16  # the model's own dtype, from its config
        torch.testing.assert_close(weight, expected.to(weight.dtype), rtol=0, atol=0)
        assert checkpoint.read_rows(f"{module}.weight", range(5, 9)).equal(weight[5:9])


@pytest.mark.parametrize(("drop", "said"), [(".absmax", "absmax"), (".nested_absmax", "nested_absmax"),
                                            (".quant_state.bitsandbytes__nf4", "quant_state")])
def test_a_missing_side_tensor_is_named_when_the_model_is_opened(llama_base, tmp_path, drop, said):
    folder = quantized_copy(llama_base, tmp_path / "q", bnb_4bit(), bnb_4bit_settings())
    stored = load_file(folder / "model.safetensors")
    victim = "model.layers.1.mlp.up_proj.weight"
    del stored[victim + drop]
    save_file(stored, folder / "model.safetensors")
    with pytest.raises(QuantizedCheckpointError, match=rf'"{victim}".*{said}'):
        open_checkpoint(folder)


def test_a_quant_state_whose_shape_does_not_fit_the_packed_weight_is_refused(llama_base, tmp_path):
    folder = quantized_copy(llama_base, tmp_path / "q", bnb_4bit(), bnb_4bit_settings())
    stored = load_file(folder / "model.safetensors")
    key = "model.layers.0.mlp.gate_proj.weight.quant_state.bitsandbytes__nf4"
    state = json.loads(bytes(stored[key].tolist()))
    state["shape"] = [state["shape"][0] * 2, state["shape"][1]]
    stored[key] = torch.tensor(list(json.dumps(state).encode()), dtype=torch.uint8)
    save_file(stored, folder / "model.safetensors")
    with pytest.raises(QuantizedCheckpointError, match=r'"model.layers.0.mlp.gate_proj.weight".*do not fit'):
        open_checkpoint(folder)
