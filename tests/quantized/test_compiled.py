"""The compiled dequantizing loops (guiapp/checkpoints/quantized/compiled.py) give torch's bits, for every output
dtype, both instruction sets of the 4-bit loop this CPU has, and the scale layouts FP8 checkpoints use; where they
cannot run, the readers' torch path gives the same model."""

from __future__ import annotations

import ctypes

import pytest
import torch

from guiapp.checkpoints.quantized import compiled
from guiapp.checkpoints.quantized.fp8 import dequantized, expand
from guiapp.checkpoints.reading import open_checkpoint
from tests.quantized.helpers import bnb_4bit, bnb_4bit_settings, quantized_copy

pytestmark = pytest.mark.skipif(compiled._llvm() is None, reason="no llvmlite here: torch dequantizes")
needs_four_bit_loops = pytest.mark.skipif(compiled.four_bit_instructions() is None,
                                          reason="no 4-bit loops on this CPU (neither AVX-512 nor AVX2)")


def _stored_here(dtype: torch.dtype):
    """`dtype` as a test parameter, skipped where this CPU gets no loop writing it (float16 on x86 without F16C)."""
    llvm = compiled._llvm()
    here = llvm is None or compiled.writes_directly(dtype, llvm.get_host_cpu_features(), llvm.get_process_triple())
    return pytest.param(dtype, marks=pytest.mark.skipif(not here, reason=f"no loop writes {dtype} on this CPU"),
                        id=str(dtype).removeprefix("torch."))


DTYPES = [_stored_here(dtype) for dtype in (torch.bfloat16, torch.float16, torch.float32)]


def _same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    integer = {2: torch.int16, 4: torch.int32}[actual.element_size()]
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan)
    assert torch.equal(actual.view(integer)[~nan], expected.view(integer)[~nan])


def _four_bit_case(seed: int = 0, count: int = 1 << 16, blocksize: int = 64):
    generator = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (count // 2,), dtype=torch.uint8, generator=generator)
    book = torch.randn(16, generator=generator)
    absmax = torch.rand(count // blocksize, generator=generator) * 3
    # Blocks whose products are subnormal, overflow to infinity, or are NaN; a zero block.
    absmax[:5] = torch.tensor([1e-40, 1e38 * 3, float("inf"), float("nan"), 0.0])
    return packed, book, absmax


def _torch_four_bit(packed, book, absmax, blocksize, dtype) -> torch.Tensor:
    codes = torch.stack((packed >> 4, packed & 0x0F), dim=1).reshape(-1).long()
    return (book[codes].view(-1, blocksize) * absmax.unsqueeze(1)).reshape(-1).to(dtype)


@needs_four_bit_loops
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_4bit_loop_gives_torchs_bits(dtype):
    packed, book, absmax = _four_bit_case()
    _same_bits(compiled.dequantize_four_bit(packed, absmax, book, 64, dtype),
               _torch_four_bit(packed, book, absmax, 64, dtype))


@pytest.mark.parametrize("instructions", ["AVX-512", "AVX2"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_both_instruction_sets_of_the_4bit_loop_give_torchs_bits(instructions, dtype):
    features = compiled._llvm().get_host_cpu_features()
    if not features.get({"AVX-512": "avx512f", "AVX2": "avx2"}[instructions]):
        pytest.skip(f"this CPU has no {instructions}")
    output = compiled._OUTPUTS[dtype]
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    loop = compiled._compiled(f"{compiled._LOOK_UP_DECLARATION[instructions]}\n"
                              f"{compiled._four_bit_loop(output, instructions)}", f"four_bit_{output}", dtype,
                              ctypes.CFUNCTYPE(None, pointer, pointer, pointer, pointer, count, count))
    packed, book, absmax = _four_bit_case(seed=1, blocksize=128)
    out = torch.empty(packed.numel() * 2, dtype=dtype)
    loop(packed.data_ptr(), book.data_ptr(), absmax.data_ptr(), out.data_ptr(), absmax.numel(), 128 // 16)
    _same_bits(out, _torch_four_bit(packed, book, absmax, 128, dtype))


@needs_four_bit_loops
def test_the_4bit_loop_declines_what_it_cannot_do():
    packed, book, absmax = _four_bit_case(count=1 << 10)
    assert compiled.dequantize_four_bit(packed, absmax, book, 64, torch.float64) is None
    assert compiled.dequantize_four_bit(packed, absmax.repeat(2), book, 32 + 8, torch.bfloat16) is None  # 40 a block
    assert compiled.dequantize_four_bit(packed[:-1], absmax, book, 64, torch.bfloat16) is None  # not whole blocks
    assert compiled.dequantize_four_bit(packed, absmax, book[:8], 64, torch.bfloat16) is None
    assert compiled.dequantize_four_bit(packed[:0], absmax[:0], book, 0, torch.bfloat16) is None


def test_float16_is_compiled_only_where_the_cpu_stores_it_itself():
    """Without F16C, LLVM turns float32 -> float16 into a call to a C runtime routine the compiled code may not
    find: a crash when the loop runs. Such CPUs get torch's path instead."""
    llvm = compiled._llvm()
    if not llvm.get_process_triple().startswith("x86_64"):
        pytest.skip("the x86 case is compiled with the x86 backend, which an LLVM built for this CPU may lack")
    plain = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(
        cpu="x86-64", features="-f16c", opt=3, jit=True, reloc="static")
    module = llvm.parse_assembly(f"{compiled._FLOAT8_DECLARATIONS}\n{compiled._float8_loop('float8_e4m3fn', 'float16')}",
                                 context=llvm.create_context())
    assert "__truncsfhf2" in plain.emit_assembly(module)  # the routine it would call
    assert not compiled.writes_directly(torch.float16, {"f16c": False}, "x86_64-unknown-linux-gnu")
    assert compiled.writes_directly(torch.float16, {"f16c": True}, "x86_64-unknown-linux-gnu")
    assert compiled.writes_directly(torch.float16, {}, "aarch64-unknown-linux-gnu")
    assert compiled.writes_directly(torch.bfloat16, {}, "x86_64-unknown-linux-gnu")


def _float8_codes(dtype: torch.dtype, rows: int, columns: int, seed: int = 0) -> torch.Tensor:
    """Every finite code of `dtype`, subnormals and zeros included, in random places."""
    generator = torch.Generator().manual_seed(seed)
    finite = torch.arange(256, dtype=torch.uint8).view(dtype).float().isfinite()
    choices = torch.arange(256, dtype=torch.uint8)[finite]
    picks = torch.randint(0, len(choices), (rows * columns,), generator=generator)
    return choices[picks].view(rows, columns).view(dtype)


@pytest.mark.parametrize("float8", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("scale_shape", "blocks"), [((3, 4), (128, 128)), ((300, 1), None), ((1, 1), None),
                                                     ((300, 8), None)])
def test_the_float8_loop_gives_torchs_bits_for_every_scale_layout(float8, dtype, scale_shape, blocks):
    codes = _float8_codes(float8, 300, 512)
    generator = torch.Generator().manual_seed(2)
    scale = torch.rand(scale_shape, generator=generator) * 1e-3 + 1e-6
    expected = (codes.float() * expand(scale, tuple(codes.shape), blocks)).to(dtype)
    per_row = expand(scale, (300, scale_shape[1]), blocks).expand(300, scale_shape[1])
    _same_bits(compiled.dequantize_float8(codes, per_row, dtype), expected)
    _same_bits(dequantized(codes, scale, dtype, blocks), expected)  # the reader's entry point takes it


def test_a_float8_code_without_a_value_of_its_own_is_left_to_torch():
    codes = _float8_codes(torch.float8_e4m3fn, 16, 32)
    codes.view(torch.uint8)[3, 5] = 0x7F  # NaN
    scale = torch.ones(16, 1)
    assert compiled.dequantize_float8(codes, scale, torch.bfloat16) is None
    values = dequantized(codes, scale, torch.bfloat16)
    assert values[3, 5].isnan() and values.isnan().sum() == 1


def test_a_scale_the_exponent_shift_would_overflow_is_left_to_torch():
    codes = _float8_codes(torch.float8_e4m3fn, 16, 32)
    assert compiled.dequantize_float8(codes, torch.full((16, 1), 1e30), torch.bfloat16) is None


def test_the_probe_says_what_dequantizes_on_this_cpu(monkeypatch):
    instructions = compiled.four_bit_instructions()
    summary = compiled.cpu_summary()
    if instructions is not None:
        assert summary == f"On the CPU, 4-bit and FP8 models are dequantized by loops compiled for it ({instructions})."
    else:
        assert "FP8 models are dequantized by a loop compiled for it; 4-bit ones by torch" in summary
    monkeypatch.setattr(compiled, "_four_bit_loop_for", lambda dtype: None)
    monkeypatch.setattr(compiled, "_float8_loop_for", lambda name, dtype: None)
    assert "dequantized by torch: llvmlite" in compiled.cpu_summary()


@needs_four_bit_loops
def test_without_the_compiled_loops_a_4bit_model_reads_the_same(llama_base, tmp_path, monkeypatch):
    folder = quantized_copy(llama_base, tmp_path / "q", bnb_4bit("nf4", True), bnb_4bit_settings("nf4", True))
    name = "model.layers.0.mlp.down_proj.weight"
    with open_checkpoint(folder) as checkpoint:
        fast_whole, fast_rows = checkpoint.read(name), checkpoint.read_rows(name, range(2, 9))
    calls = []
    original = compiled.dequantize_four_bit
    monkeypatch.setattr(compiled, "dequantize_four_bit", lambda *args: calls.append(1) or original(*args))
    with open_checkpoint(folder) as checkpoint:
        checkpoint.read_rows(name, range(2, 9))
    assert calls  # the reader takes the compiled loop where there is one
    monkeypatch.setattr(compiled, "dequantize_four_bit", lambda *args: None)  # as where there is none
    with open_checkpoint(folder) as checkpoint:
        _same_bits(checkpoint.read(name), fast_whole)
        _same_bits(checkpoint.read_rows(name, range(2, 9)), fast_rows)
