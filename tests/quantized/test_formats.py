"""FP8, compressed-tensors, GPTQ, AWQ and MXFP4 checkpoints read as their dequantized weights: against
compressed-tensors' own decompressor, and against hand-made cases built element by element from each published
layout elsewhere."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from guiapp.checkpoints.quantized.fp8 import FLOAT8, dequantized
from guiapp.checkpoints.quantized.layout import look_up
from guiapp.checkpoints.reading import open_checkpoint
from guiapp.errors import QuantizedCheckpointError, UnknownQuantizationError
from tests.quantized.helpers import quantized_copy

NAME = "model.layers.0.mlp.down_proj.weight"  # [64, 128]: hidden x intermediate


def _read(folder, name=NAME):
    """The weight `name` read whole, and its header; its rows read in runs that cross block edges are checked to
    be the same rows."""
    with open_checkpoint(folder) as checkpoint:
        assert not any(n.endswith(("_scale", "_scale_inv", "qweight", "_packed", "_blocks")) for n in checkpoint.tensors)
        weight = checkpoint.read(name)
        for rows in (range(0, 5), range(30, 50), range(47, 64), range(64, 64)):
            assert checkpoint.read_rows(name, rows).equal(weight[rows.start:rows.stop]), rows
        return weight, checkpoint.tensors[name]


# --- FP8 -------------------------------------------------------------------------------------------------------

def _fp8_blocks(block: int, dtype=torch.float8_e4m3fn):
    def quantize(name, weight):
        weight = weight.float()
        rows, cols = -(-weight.shape[0] // block), -(-weight.shape[1] // block)
        scale = torch.empty(rows, cols)
        codes = torch.empty(weight.shape, dtype=dtype)
        for i in range(rows):
            for j in range(cols):
                piece = weight[i * block:(i + 1) * block, j * block:(j + 1) * block]
                scale[i, j] = piece.abs().max() / torch.finfo(dtype).max
                codes[i * block:(i + 1) * block, j * block:(j + 1) * block] = (piece / scale[i, j]).to(dtype)
        return {name: codes, f"{name}_scale_inv": scale}
    return quantize


@pytest.mark.parametrize("block", [32, 48])  # 48 leaves ragged blocks at the edges of 64 x 128
def test_fp8_with_block_scales_dequantizes_block_by_block(llama_base, tmp_path, block):
    settings = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [block, block]}
    folder = quantized_copy(llama_base, tmp_path / "q", _fp8_blocks(block), settings)
    stored = load_file(folder / "model.safetensors")
    codes, scale = stored[NAME], stored[f"{NAME}_scale_inv"]
    expected = torch.empty(codes.shape)
    for row in range(codes.shape[0]):
        for col in range(codes.shape[1]):
            expected[row, col] = codes[row, col].float() * scale[row // block, col // block]
    weight, info = _read(folder)
    assert info.shape == (64, 128) and weight.dtype == torch.bfloat16
    torch.testing.assert_close(weight, expected.bfloat16(), rtol=0, atol=0)
    original = load_file(llama_base / "model.safetensors")[NAME].float()
    assert (weight.float() - original).abs().max() < 0.1 * original.abs().max()


def test_fp8_block_scales_of_another_block_size_than_the_settings_say_are_refused(llama_base, tmp_path):
    settings = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    folder = quantized_copy(llama_base, tmp_path / "q", _fp8_blocks(32), settings)
    with pytest.raises(QuantizedCheckpointError, match=r'"model.layers.0.mlp.\w+_proj.weight".*blocks of 128x128'):
        open_checkpoint(folder)


@pytest.mark.parametrize("per_channel", [True, False])
def test_fp8_with_a_weight_scale_per_tensor_or_per_channel(llama_base, tmp_path, per_channel):
    def quantize(name, weight):
        weight = weight.float()
        scale = (weight.abs().amax(1, keepdim=True) if per_channel else weight.abs().max()) / 57344.0
        return {name: (weight / scale).to(torch.float8_e5m2), f"{name}_scale": scale,
                name.replace("weight", "input_scale"): torch.tensor(1.0)}

    folder = quantized_copy(llama_base, tmp_path / "q", quantize, {"quant_method": "fbgemm_fp8"})
    stored = load_file(folder / "model.safetensors")
    codes, scale = stored[NAME], stored[f"{NAME}_scale"]
    expected = torch.stack([codes[r].float() * (scale[r, 0] if per_channel else scale) for r in range(codes.shape[0])])
    weight, _ = _read(folder)
    torch.testing.assert_close(weight, expected.bfloat16(), rtol=0, atol=0)


# --- compressed-tensors (its own compressors are the reference) -------------------------------------------------

@pytest.mark.parametrize(("bits", "symmetric", "strategy"), [(4, True, "group"), (4, False, "group"),
                                                             (8, True, "channel"), (4, False, "channel")])
def test_compressed_tensors_pack_quantized_reads_as_its_decompressor_gives(llama_base, tmp_path, bits, symmetric,
                                                                           strategy):
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams

    group = 16 if strategy == "group" else None
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=symmetric, strategy=strategy, group_size=group)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    references = {}

    def quantize(name, weight):
        weight = weight.float()
        pieces = weight.view(weight.shape[0], -1, group) if group else weight.unsqueeze(1)
        scale, zero = calculate_qparams(pieces.amin(-1), pieces.amax(-1), args)
        state = {"weight": weight, "weight_scale": scale, "weight_zero_point": zero}
        packed = PackedQuantizationCompressor.compress(state, scheme)
        references[name] = PackedQuantizationCompressor.decompress(dict(packed), scheme)["weight"]
        module = name.removesuffix(".weight")
        return {f"{module}.{key}": value for key, value in packed.items()}

    settings = {"quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": args.model_dump()}}}
    folder = quantized_copy(llama_base, tmp_path / "q", quantize, settings)
    weight, info = _read(folder)
    assert info.shape == (64, 128)
    torch.testing.assert_close(weight, references[NAME].bfloat16(), rtol=0, atol=0)


def test_compressed_tensors_float_quantized_reads_as_its_decompressor_gives(llama_base, tmp_path):
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams

    args = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="channel")
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    references = {}

    def quantize(name, weight):
        weight = weight.float()
        scale, zero = calculate_qparams(weight.amin(1, keepdim=True), weight.amax(1, keepdim=True), args)
        packed = FloatQuantizationCompressor.compress({"weight": weight, "weight_scale": scale}, scheme)
        references[name] = FloatQuantizationCompressor.decompress(dict(packed), scheme)["weight"]
        module = name.removesuffix(".weight")
        return {f"{module}.{key}": value for key, value in packed.items()}

    settings = {"quant_method": "compressed-tensors", "format": "float-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": args.model_dump()}}}
    folder = quantized_copy(llama_base, tmp_path / "q", quantize, settings)
    weight, _ = _read(folder)
    torch.testing.assert_close(weight, references[NAME].bfloat16(), rtol=0, atol=0)


def test_a_packed_weight_that_does_not_fit_its_weight_shape_is_refused(llama_base, tmp_path):
    def quantize(name, weight):
        rows, cols = weight.shape
        return {name.replace("weight", "weight_packed"): torch.zeros(rows, cols // 8, dtype=torch.int32),
                name.replace("weight", "weight_scale"): torch.ones(rows, 1),
                name.replace("weight", "weight_shape"): torch.tensor([rows, cols * 2])}

    settings = {"quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}}
    folder = quantized_copy(llama_base, tmp_path / "q", quantize, settings)
    with pytest.raises(QuantizedCheckpointError, match=r"weight_packed.*do not fit its weight_shape"):
        open_checkpoint(folder)


# --- GPTQ and AWQ (hand-made from the published layouts) -----------------------------------------------------------

def _pack_words(values: list[int], bits: int) -> int:
    word = 0
    for position, value in enumerate(values):
        word |= value << (bits * position)
    return word - (1 << 32) if word >= 1 << 31 else word  # stored as int32


GROUP = 32


def _integer_case(weight: torch.Tensor, generator: torch.Generator):
    """Random 4-bit codes, zero points and scales for a [out, in] weight in groups of GROUP input rows."""
    out, rows = weight.shape
    codes = torch.randint(0, 16, (rows, out), generator=generator)
    zeros = torch.randint(1, 16, (rows // GROUP, out), generator=generator)  # GPTQ v1 stores zero - 1 in 4 bits
    scales = torch.rand(rows // GROUP, out, generator=generator).half() * 0.01
    return codes, zeros, scales


def test_gptq_dequantizes_as_its_layout_says(llama_base, tmp_path):
    generator = torch.Generator().manual_seed(0)
    expected = {}

    def quantize(name, weight):
        codes, zeros, scales = _integer_case(weight, generator)
        rows, out = codes.shape
        g_idx = torch.randperm(rows, generator=generator) // GROUP  # act-order: groups shuffled over the rows
        qweight = torch.tensor([[_pack_words([int(codes[r * 8 + i, c]) for i in range(8)], 4) for c in range(out)]
                                for r in range(rows // 8)], dtype=torch.int32)
        qzeros = torch.tensor([[_pack_words([int(zeros[g, c * 8 + i]) - 1 for i in range(8)], 4)
                                for c in range(out // 8)] for g in range(rows // GROUP)], dtype=torch.int32)
        expected[name] = torch.tensor([[(int(codes[r, c]) - int(zeros[g_idx[r], c])) * float(scales[g_idx[r], c])
                                        for r in range(rows)] for c in range(out)])
        module = name.removesuffix(".weight")
        return {f"{module}.qweight": qweight, f"{module}.qzeros": qzeros, f"{module}.scales": scales,
                f"{module}.g_idx": g_idx.int()}

    settings = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": True, "sym": False}
    folder = quantized_copy(llama_base, tmp_path / "q", quantize, settings)
    weight, info = _read(folder)
    assert info.shape == (64, 128)
    torch.testing.assert_close(weight, expected[NAME].bfloat16(), rtol=0, atol=0)


def test_awq_dequantizes_in_its_packing_order(llama_base, tmp_path):
    generator = torch.Generator().manual_seed(1)
    expected = {}
    order = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ's pack order: nibble i holds column order[i] of each eight

    def quantize(name, weight):
        codes, zeros, scales = _integer_case(weight, generator)
        rows, out = codes.shape
        qweight = torch.tensor([[_pack_words([int(codes[r, c * 8 + order[i]]) for i in range(8)], 4)
                                 for c in range(out // 8)] for r in range(rows)], dtype=torch.int32)
        qzeros = torch.tensor([[_pack_words([int(zeros[g, c * 8 + order[i]]) for i in range(8)], 4)
                                for c in range(out // 8)] for g in range(rows // GROUP)], dtype=torch.int32)
        expected[name] = torch.tensor([[(int(codes[r, c]) - int(zeros[r // GROUP, c])) * float(scales[r // GROUP, c])
                                        for r in range(rows)] for c in range(out)])
        module = name.removesuffix(".weight")
        return {f"{module}.qweight": qweight, f"{module}.qzeros": qzeros, f"{module}.scales": scales}

    settings = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "version": "gemm", "zero_point": True}
    folder = quantized_copy(llama_base, tmp_path / "q", quantize, settings)
    weight, _ = _read(folder)
    torch.testing.assert_close(weight, expected[NAME].bfloat16(), rtol=0, atol=0)


def test_gptq_scales_of_the_wrong_group_count_are_named(llama_base, tmp_path):
    def quantize(name, weight):
        out, rows = weight.shape
        module = name.removesuffix(".weight")
        return {f"{module}.qweight": torch.zeros(rows // 8, out, dtype=torch.int32),
                f"{module}.qzeros": torch.zeros(rows // 64, out // 8, dtype=torch.int32),
                f"{module}.scales": torch.ones(rows // 64, out, dtype=torch.float16)}

    folder = quantized_copy(llama_base, tmp_path / "q", quantize, {"quant_method": "gptq", "bits": 4, "group_size": 32})
    with pytest.raises(QuantizedCheckpointError, match=r'"model.layers.0.\w+.\w+_proj".*qzeros'):
        open_checkpoint(folder)


# --- MXFP4 (gpt-oss) -----------------------------------------------------------------------------------------------

FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def test_mxfp4_experts_dequantize_as_gpt_oss_lays_them_out(tmp_path):
    generator = torch.Generator().manual_seed(2)
    experts, rows, groups = 2, 6, 3
    blocks = torch.randint(0, 256, (experts, rows, groups, 16), generator=generator, dtype=torch.uint8)
    scales = torch.randint(120, 130, (experts, rows, groups), generator=generator, dtype=torch.uint8)
    expected = torch.empty(experts, groups * 32, rows)
    for e in range(experts):
        for r in range(rows):
            for g in range(groups):
                for b in range(16):
                    byte, power = int(blocks[e, r, g, b]), 2.0 ** (int(scales[e, r, g]) - 127)
                    expected[e, g * 32 + 2 * b, r] = FP4[byte & 15] * power  # low nibble first
                    expected[e, g * 32 + 2 * b + 1, r] = FP4[byte >> 4] * power
    name = "model.layers.0.mlp.experts.gate_up_proj"
    save_file({f"{name}_blocks": blocks, f"{name}_scales": scales, "model.norm.weight": torch.ones(4)},
              tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16", "quantization_config": {
        "quant_method": "mxfp4", "modules_to_not_convert": ["router"]}}))
    with open_checkpoint(tmp_path) as checkpoint:
        assert set(checkpoint.tensors) == {name, "model.norm.weight"}
        assert checkpoint.tensors[name].shape == (experts, groups * 32, rows)
        torch.testing.assert_close(checkpoint.read(name), expected.bfloat16(), rtol=0, atol=0)


def test_mxfp4_blocks_without_their_scales_are_named(tmp_path):
    save_file({"experts.down_proj_blocks": torch.zeros(2, 4, 1, 16, dtype=torch.uint8)}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "mxfp4"}}))
    with pytest.raises(QuantizedCheckpointError, match=r'"experts.down_proj_blocks" has no scales'):
        open_checkpoint(tmp_path)


# --- any method ------------------------------------------------------------------------------------------------------

def test_an_unknown_quant_method_is_named(llama_base, tmp_path):
    folder = quantized_copy(llama_base, tmp_path / "q", lambda name, weight: {name: weight},
                            {"quant_method": "hqq", "nbits": 4})
    with pytest.raises(UnknownQuantizationError, match='quantized with "hqq", which Mergesmith cannot read yet'):
        open_checkpoint(folder)


@pytest.mark.parametrize(("settings", "title"), [
    ({"quant_method": "hqq"}, "This model's quantization cannot be read yet"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "A quantized model's files do not fit together"),
])
def test_the_refusals_are_explained_by_the_catalogue(llama_base, tmp_path, settings, title):
    from guiapp.system.explain import explain

    folder = quantized_copy(llama_base, tmp_path / "q", _fp8_blocks(32), settings)
    with pytest.raises((UnknownQuantizationError, QuantizedCheckpointError)) as caught:
        open_checkpoint(folder)
    explanation = explain(caught.value)
    assert explanation.recognised and explanation.title == title
    assert explain(str(caught.value)).title == title  # pasted text is recognised too


def test_a_plain_model_whose_tensor_names_end_like_side_tensors_is_not_taken_for_a_quantized_one(tmp_path):
    save_file({"encoder.conv_blocks": torch.ones(2, 3), "encoder.norm.weight": torch.ones(3)},
              tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "custom"}))
    with open_checkpoint(tmp_path) as checkpoint:
        assert checkpoint.quantized is None and set(checkpoint.tensors) == {"encoder.conv_blocks", "encoder.norm.weight"}


@pytest.mark.parametrize("codes", ["every", "finite"])
@pytest.mark.parametrize("target", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_codes_scaled_in_the_model_dtype_give_the_bits_of_scaling_in_float32(dtype, target, codes):
    # Every one of the 256 codes (NaNs, infinities, subnormals, negative zero), or every finite one (where the
    # codes' bits are moved into bfloat16's places rather than looked up), in a matrix read through a transposed
    # (non-contiguous) view as the row readers may hand it, with a scale per row and per block of columns:
    # dequantized straight into the model's dtype, the same bits as converting to float32, scaling and converting.
    every = torch.arange(256, dtype=torch.uint8).view(dtype)
    chosen = every if codes == "every" else every[torch.isfinite(every.float())]
    matrix = chosen.repeat(32)[: 16 * 16 * 2].reshape(32, 16).t()
    for scale, blocks in ((torch.rand(16, 1, generator=torch.Generator().manual_seed(0)) * 3, None),
                          (torch.rand(16, 4, generator=torch.Generator().manual_seed(1)) * 0.01, (1, 8))):
        values = dequantized(matrix, scale, target, blocks)
        expected = (matrix.float() * scale.repeat_interleave(32 // scale.shape[1], 1)).to(target)
        assert values.dtype == target and values.shape == matrix.shape
        assert torch.equal(values.reshape(-1).view(torch.uint8), expected.reshape(-1).view(torch.uint8))


@pytest.mark.parametrize(("dtype", "width"), [(torch.uint8, 1), (torch.bfloat16, 1), (torch.float32, 1),
                                              (torch.float32, 2), (torch.float64, 1), (torch.float32, 3)], ids=str)
def test_a_table_look_up_gives_each_codes_row_whatever_its_width(dtype, width):
    # Rows of 1, 2, 4 and 8 bytes are gathered as one integer each, other widths as rows of bytes: each code's row,
    # bit for bit (NaN payloads too), for codes read through a non-contiguous view.
    table = torch.randint(0, 256, (256, width * dtype.itemsize), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(2)).view(dtype)
    table = table.reshape(256) if width == 1 else table
    codes = torch.randint(0, 256, (24, 40), dtype=torch.uint8, generator=torch.Generator().manual_seed(3)).t()
    values = look_up(table, codes)
    assert values.dtype == dtype
    assert torch.equal(values.view(torch.uint8), table[codes.reshape(-1).long()].reshape(-1).view(torch.uint8))
