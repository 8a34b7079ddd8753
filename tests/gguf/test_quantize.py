"""The quantizers and the type mixes: blocks made here decode with gguf-py's dequantizer (llama.cpp's reference in
NumPy) within each type's bound, match gguf-py's own quantizer where it has one, and each tensor gets the type
llama.cpp's `llama_tensor_get_type` gives it."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from guiapp.gguf.quantize import FILE_KINDS, encode, stored_bytes, tensor_type

Q = gguf.GGMLQuantizationType
BOUNDS = {Q.Q8_0: 0.01, Q.Q6_K: 0.03, Q.Q5_K: 0.06, Q.Q5_1: 0.05, Q.Q5_0: 0.06, Q.Q4_K: 0.12, Q.Q4_0: 0.14,
          Q.F16: 1e-3, Q.BF16: 5e-3, Q.F32: 0.0}


@pytest.mark.parametrize("qtype", list(BOUNDS))
@pytest.mark.parametrize("threads", [1, 2])
def test_blocks_decode_with_gguf_py_within_the_types_bound(qtype, threads):
    rows = torch.randn(24, 512, generator=torch.Generator().manual_seed(0)) * 0.05
    data = encode(rows, qtype, threads)
    assert data.dtype == np.uint8 and data.nbytes == stored_bytes(tuple(rows.shape), qtype)
    decoded = gguf.quants.dequantize(data.reshape(rows.shape[0], -1), qtype)
    error = np.sqrt(((decoded - rows.numpy()) ** 2).mean()) / np.sqrt((rows.numpy() ** 2).mean())
    assert error <= BOUNDS[qtype]


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.F16, Q.BF16])
def test_blocks_are_those_of_gguf_pys_own_quantizer(qtype):
    rows = torch.randn(8, 256, generator=torch.Generator().manual_seed(1))
    mine = encode(rows, qtype, 2)
    reference = gguf.quants.quantize(rows.numpy(), qtype).view(np.uint8).reshape(-1)
    assert np.array_equal(mine, reference)


def test_a_bf16_source_is_stored_exactly_as_bf16():
    rows = torch.randn(4, 64, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    stored = encode(rows.float(), Q.BF16)
    assert np.array_equal(stored.view(np.int16), rows.view(torch.int16).numpy().reshape(-1))


def _mix(kind: str, layers: int = 32, columns: int = 4096) -> dict[str, Q]:
    names = ["token_embd.weight", "output.weight", "output_norm.weight"] + [
        f"blk.{i}.{part}.weight" for i in range(layers)
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "attn_norm")]
    return {name: tensor_type(FILE_KINDS[kind], name, (columns,) if "norm" in name else (columns, columns),
                              layers, tied=False) for name in names}


def test_q4_k_m_follows_llama_cpps_recipe_for_a_32_layer_model():
    mix = _mix("q4_k_m")
    six = sorted(int(name.split(".")[1]) for name, qtype in mix.items() if qtype == Q.Q6_K and ".attn_v." in name)
    # use_more_bits: layers below 32/8, from 7*32/8 on, and every third between (i - 4) % 3 == 2.
    assert six == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    assert [mix[f"blk.{i}.ffn_down.weight"] == Q.Q6_K for i in range(32)] == \
        [mix[f"blk.{i}.attn_v.weight"] == Q.Q6_K for i in range(32)]
    assert mix["output.weight"] == Q.Q6_K and mix["token_embd.weight"] == Q.Q4_K
    assert mix["blk.5.attn_q.weight"] == Q.Q4_K and mix["blk.5.attn_norm.weight"] == Q.F32
    # About 80 % of the weights Q4_K and 20 % Q6_K: near 4.9 bits per weight, as llama.cpp's files.
    sizes = {name: 4096 * 4096 for name in mix if "norm" not in name}
    bits = sum(stored_bytes((4096, 4096), mix[name]) * 8 for name in sizes) / sum(sizes.values())
    assert 4.7 < bits < 5.0


def test_q5_k_m_q6_k_and_q8_0_mixes():
    assert _mix("q5_k_m")["blk.0.attn_v.weight"] == Q.Q6_K and _mix("q5_k_m")["blk.5.attn_v.weight"] == Q.Q5_K
    assert set(_mix("q6_k").values()) == {Q.Q6_K, Q.F32}
    assert set(_mix("q8_0").values()) == {Q.Q8_0, Q.F32}
    assert _mix("q4_0")["output.weight"] == Q.Q6_K  # llama.cpp gives even Q4_0 files a Q6_K output


def test_a_tied_embedding_is_quantized_as_the_output():
    kind = FILE_KINDS["q4_k_m"]
    assert tensor_type(kind, "token_embd.weight", (32000, 4096), 32, tied=True) == Q.Q6_K


@pytest.mark.parametrize(("kind", "columns", "expected"), [
    ("q4_k_m", 64, Q.Q5_0), ("q5_k_m", 64, Q.Q5_1), ("q6_k", 64, Q.Q8_0), ("q4_k_m", 80, Q.F16),
    ("q8_0", 80, Q.F16)])
def test_rows_not_divisible_by_the_block_fall_back(kind, columns, expected):
    assert tensor_type(FILE_KINDS[kind], "blk.3.attn_q.weight", (64, columns), 8, tied=False) == expected


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K, Q.Q5_0])
def test_blocks_made_on_several_threads_are_those_made_on_one(qtype):
    rows = torch.randn(37, 256, generator=torch.Generator().manual_seed(3))
    assert np.array_equal(encode(rows, qtype, 1), encode(rows, qtype, 3))
