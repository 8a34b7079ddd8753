"""Dequantizing loops compiled for this CPU when first needed: 4-bit codes and float8 codes, scaled, rounded into the
model's dtype in one pass.

Why: torch dequantizes in passes over the whole block (codes widened to indices, a gather, a scale, a rounding),
each of them a trip through memory; reading a 4-bit model cost a merge 0.5 ns a value that way, half again the time
of merging its bf16 copy. These loops keep a group of 16 values in registers from the packed bytes to the stored
result. A 4-bit code's value comes from a 16-entry code book, which the vector units look up in one instruction
(AVX-512's vpermps, or two of AVX2's 8-entry ones): 0.16 ns a value (AVX-512) or 0.26 (AVX2) against torch's 0.5,
with the same bits. Float8 needs no table: its bits are moved into bfloat16's places as `fp8.py` explains, plain
vector arithmetic that LLVM compiles for any CPU.

The loops are LLVM code compiled by llvmlite (which numba brings, for the GGUF kernels) for the CPU the process runs
on, each when a job first needs it (10-20 ms); where llvmlite is missing, or the CPU has neither AVX-512 nor AVX2 for
the 4-bit loop, the callers use torch. Each result is bit for bit torch's (tests/quantized/test_compiled.py).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from guiapp.facts.dtypes import DEQUANTIZED_STORAGE, FLOAT8_FIELDS, dtype_name

LANES = 16  # values a loop turn makes: one AVX-512 register of float32
_OUTPUTS = {getattr(torch, name): name for name in DEQUANTIZED_STORAGE}  # torch dtype -> its name


def dequantize_four_bit(packed: torch.Tensor, absmax: torch.Tensor, code_book: torch.Tensor, blocksize: int,
                        dtype: torch.dtype) -> torch.Tensor | None:
    """`packed` 4-bit codes (two a byte, high nibble first) times the float32 `absmax` of their block, as `dtype`;
    None when there is no compiled loop for this (no llvmlite or vector unit, a dtype other than bf16/fp16/fp32,
    tensors not on the CPU, a block not a multiple of 16 values, a code book not of 16 values): use torch then."""
    blocks = absmax.numel()
    if dtype not in _OUTPUTS or blocksize <= 0 or blocksize % LANES or code_book.numel() != 16 \
            or packed.numel() * packed.element_size() * 2 != blocks * blocksize \
            or any(t.device.type != "cpu" for t in (packed, absmax, code_book)):
        return None
    loop = _four_bit_loop_for(dtype)
    if loop is None:
        return None
    packed = packed.contiguous().view(torch.uint8)
    absmax, book = absmax.float().contiguous(), code_book.float().contiguous()
    out = torch.empty(blocks * blocksize, dtype=dtype)
    loop(packed.data_ptr(), book.data_ptr(), absmax.data_ptr(), out.data_ptr(), blocks, blocksize // LANES)
    return out


def dequantize_float8(codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """`codes` (float8, rows x columns) times `scales` (float32, rows x groups: one per row and group of
    columns, the groups equal), as `dtype`; None when there is no compiled loop for this (no llvmlite, another
    format or dtype, tensors not on the CPU, groups not a multiple of 16 columns), a scale that the loop's
    exponent shift would take past float32's range, or a code with no value of its own (NaN, infinity): torch
    handles those."""
    name = dtype_name(codes.dtype)
    if name not in FLOAT8_FIELDS or dtype not in _OUTPUTS or codes.dim() != 2 or scales.dim() != 2 \
            or scales.shape[0] != codes.shape[0] or scales.shape[1] == 0 or codes.shape[1] % scales.shape[1] \
            or (codes.shape[1] // scales.shape[1]) % LANES or codes.numel() == 0 \
            or codes.device.type != "cpu" or scales.device.type != "cpu":
        return None
    loop = _float8_loop_for(name, dtype)
    undoing = scales.float() * 2.0 ** FLOAT8_FIELDS[name].offset
    if loop is None or not bool(torch.isfinite(undoing).all()):
        return None
    codes, undoing = codes.contiguous().view(torch.uint8), undoing.contiguous()
    out = torch.empty(codes.shape, dtype=dtype)
    group = codes.shape[1] // scales.shape[1]
    unmapped = loop(codes.data_ptr(), undoing.data_ptr(), out.data_ptr(), codes.numel() // group, group // LANES)
    return None if unmapped else out


def four_bit_instructions() -> str | None:
    """The vector instructions the compiled 4-bit loops use on this CPU ("AVX-512", "AVX2"), or None where there
    are none (no llvmlite, or a CPU without either: 4-bit models are then dequantized by torch, about three times
    slower)."""
    llvm = _llvm()
    if llvm is None:
        return None
    features = llvm.get_host_cpu_features()
    return "AVX-512" if features.get("avx512f") else "AVX2" if features.get("avx2") else None


def cpu_summary() -> str:
    """What dequantizes quantized models on this CPU, in a sentence for `mergesmith probe`; compiles the loops a
    bfloat16 model's read takes (tens of milliseconds) to be sure they build here."""
    four_bit = _four_bit_loop_for(torch.bfloat16) is not None
    float8 = _float8_loop_for("float8_e4m3fn", torch.bfloat16) is not None
    if four_bit and float8:
        return f"On the CPU, 4-bit and FP8 models are dequantized by loops compiled for it ({four_bit_instructions()})."
    if float8:
        return ("On the CPU, FP8 models are dequantized by a loop compiled for it; 4-bit ones by torch, about three "
                "times slower (this CPU has neither AVX-512 nor AVX2).")
    return ("On the CPU, quantized models are dequantized by torch: llvmlite, which compiles faster loops for the "
            "CPU, is not installed or cannot compile for it here.")


def writes_directly(dtype: torch.dtype, features: Any, triple: str) -> bool:
    """Whether a loop compiled for a CPU with `features` (llvmlite's map) and `triple` stores `dtype` with its own
    instructions: float16 on x86 needs F16C, without which LLVM calls a conversion routine of the C runtime that
    compiled code in this process may not find (a crash, not an error)."""
    return dtype != torch.float16 or not triple.startswith(("x86_64", "i386", "i686")) or bool(features.get("f16c"))


# Each loop is compiled when first needed (10-20 ms each, one a job uses, against 0.1 s for all nine), in an LLVM
# context of its own: numba compiles the GGUF kernels in LLVM's shared one, maybe on another thread at that moment.
_compiling = threading.RLock()
_kept: list[Any] = []  # each loop's engine and context: the compiled code lives as long as they do


@functools.cache
def _llvm() -> Any | None:
    with _compiling:
        try:
            import llvmlite.binding as llvm  # noqa: PLC0415 - loaded with the first quantized model read (20 ms)

            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
        except (ImportError, OSError, RuntimeError):  # not installed, or its LLVM library cannot load
            return None
        return llvm


@functools.cache
def _four_bit_loop_for(dtype: torch.dtype) -> Callable[..., None] | None:
    instructions = four_bit_instructions()
    if instructions is None:
        return None
    source = f"{_LOOK_UP_DECLARATION[instructions]}\n{_four_bit_loop(_OUTPUTS[dtype], instructions)}"
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    return _compiled(source, f"four_bit_{_OUTPUTS[dtype]}", dtype,
                     ctypes.CFUNCTYPE(None, pointer, pointer, pointer, pointer, count, count))


@functools.cache
def _float8_loop_for(name: str, dtype: torch.dtype) -> Callable[..., int] | None:
    if _llvm() is None:
        return None
    source = f"{_FLOAT8_DECLARATIONS}\n{_float8_loop(name, _OUTPUTS[dtype])}"
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    return _compiled(source, f"{name}_{_OUTPUTS[dtype]}", dtype,
                     ctypes.CFUNCTYPE(ctypes.c_int32, pointer, pointer, pointer, count, count))


def _compiled(source: str, function: str, dtype: torch.dtype, signature: Any) -> Callable[..., Any] | None:
    """`function` of the LLVM IR `source`, writing `dtype`, compiled for this CPU as numba compiles for it; None
    where LLVM cannot (no target for it) or the CPU lacks what storing `dtype` takes (`writes_directly`)."""
    llvm = _llvm()
    features, triple = llvm.get_host_cpu_features(), llvm.get_process_triple()
    if not writes_directly(dtype, features, triple):
        return None
    with _compiling:
        try:
            context = llvm.create_context()
            module = llvm.parse_assembly(source, context=context)
            module.verify()
            machine = llvm.Target.from_triple(triple).create_target_machine(
                cpu=llvm.get_host_cpu_name(), features=features.flatten(), opt=3, jit=True,
                reloc="static" if triple.startswith("x86_64") else "default")
            passes = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
            passes.getModulePassManager().run(module, passes)
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
        except (RuntimeError, ValueError, OSError):  # an LLVM without this CPU's target, or a refused module
            return None
        _kept.append((engine, context))
        return signature(engine.get_function_address(function))


def _lanes(values: Any) -> str:
    return ", ".join(f"i32 {value}" for value in values)


_LOOK_UP_DECLARATION = {
    "AVX-512": "declare <16 x float> @llvm.x86.avx512.permvar.sf.512(<16 x float>, <16 x i32>)",
    "AVX2": "declare <8 x float> @llvm.x86.avx2.permps(<8 x float>, <8 x i32>)",
}


def _look_up(instructions: str) -> str:
    """IR setting %values to the code book %book looked up at the 16 codes %codes."""
    if instructions == "AVX-512":
        return "  %values = call <16 x float> @llvm.x86.avx512.permvar.sf.512(<16 x float> %book, <16 x i32> %codes)\n"
    lines = []
    for half in range(2):  # each half of the codes looked up in both halves of the book, then chosen by code > 7
        lines += [
            f"  %codes{half} = shufflevector <16 x i32> %codes, <16 x i32> poison, <8 x i32> <{_lanes(range(8 * half, 8 * half + 8))}>",
            f"  %low{half} = call <8 x float> @llvm.x86.avx2.permps(<8 x float> %book_low, <8 x i32> %codes{half})",
            f"  %high{half} = call <8 x float> @llvm.x86.avx2.permps(<8 x float> %book_high, <8 x i32> %codes{half})",
            f"  %upper{half} = icmp ugt <8 x i32> %codes{half}, splat (i32 7)",
            f"  %values{half} = select <8 x i1> %upper{half}, <8 x float> %high{half}, <8 x float> %low{half}",
        ]
    lines.append(f"  %values = shufflevector <8 x float> %values0, <8 x float> %values1, <16 x i32> <{_lanes(range(16))}>")
    return "\n".join(lines) + "\n"


def _stored(output: str) -> str:
    """IR setting %stored to %scaled (16 float32) as `output`: bf16 rounded to nearest even with NaN as torch's
    vector conversion writes it (0xFFFF); fp16 by LLVM's conversion (IEEE rounding, as torch's)."""
    if output == "float32":
        return "  %stored = bitcast <16 x float> %scaled to <16 x float>\n"
    if output == "float16":
        return "  %stored = fptrunc <16 x float> %scaled to <16 x half>\n"
    return """  %bits = bitcast <16 x float> %scaled to <16 x i32>
  %top = lshr <16 x i32> %bits, splat (i32 16)
  %odd = and <16 x i32> %top, splat (i32 1)
  %bias = add <16 x i32> %odd, splat (i32 32767)
  %biased = add <16 x i32> %bits, %bias
  %rounded = lshr <16 x i32> %biased, splat (i32 16)
  %nan = fcmp uno <16 x float> %scaled, %scaled
  %chosen = select <16 x i1> %nan, <16 x i32> splat (i32 65535), <16 x i32> %rounded
  %stored = trunc <16 x i32> %chosen to <16 x i16>
"""


def _loop(name: str, parameters: str, prologue: str, body: str, output: str, flags: bool) -> str:
    """A function `name` over `%blocks` blocks of `%turns` turns of 16 values: block %b's scale is %scales[%b],
    turn %t (counted over all blocks) runs `body`, which sets %scaled, and stores it as `output` at %out[%t]. With
    `flags`, `body` also sets %flagged (16 x i1, from %seen) and the function returns whether any lane ever was."""
    stored = DEQUANTIZED_STORAGE[output]
    seen_block = "  %seen_block = phi <16 x i1> [zeroinitializer, %entry], [%flagged, %block_end]\n" if flags else ""
    seen = "  %seen = phi <16 x i1> [%seen_block, %block], [%flagged, %turn]\n" if flags else ""
    ending = ("""  %ever = phi <16 x i1> [zeroinitializer, %entry], [%flagged, %block_end]
  %any = call i1 @llvm.vector.reduce.or.v16i1(<16 x i1> %ever)
  %flag = zext i1 %any to i32
  ret i32 %flag""" if flags else "  ret void")
    return f"""
define {"i32" if flags else "void"} @{name}({parameters}, ptr noalias %scales, ptr noalias %out, i64 %blocks, i64 %turns) {{
entry:
{prologue}  %some = icmp sgt i64 %blocks, 0
  br i1 %some, label %block, label %done
block:
  %b = phi i64 [0, %entry], [%b_next, %block_end]
{seen_block}  %scale_at = getelementptr float, ptr %scales, i64 %b
  %scale = load float, ptr %scale_at, align 4
  %scale_one = insertelement <16 x float> poison, float %scale, i32 0
  %scale_all = shufflevector <16 x float> %scale_one, <16 x float> poison, <16 x i32> zeroinitializer
  %first = mul i64 %b, %turns
  br label %turn
turn:
  %j = phi i64 [0, %block], [%j_next, %turn]
{seen}  %t = add i64 %first, %j
{body}  %scaled = fmul <16 x float> %values, %scale_all
{_stored(output)}  %out_at = getelementptr <16 x {stored}>, ptr %out, i64 %t
  store <16 x {stored}> %stored, ptr %out_at, align 2
  %j_next = add i64 %j, 1
  %more = icmp ult i64 %j_next, %turns
  br i1 %more, label %turn, label %block_end
block_end:
  %b_next = add i64 %b, 1
  %more_blocks = icmp ult i64 %b_next, %blocks
  br i1 %more_blocks, label %block, label %done
done:
{ending}
}}
"""


def _four_bit_loop(output: str, instructions: str) -> str:
    """four_bit_<output>(packed, book, absmax, out, blocks, turns): `blocks` blocks of `turns` x 16 codes."""
    interleave = _lanes(x for i in range(8) for x in (i, i + 8))  # high nibble first
    prologue = "  %book = load <16 x float>, ptr %book_at, align 4\n"
    if instructions == "AVX2":
        prologue += f"""  %book_low = shufflevector <16 x float> %book, <16 x float> poison, <8 x i32> <{_lanes(range(8))}>
  %book_high = shufflevector <16 x float> %book, <16 x float> poison, <8 x i32> <{_lanes(range(8, 16))}>
"""
    body = f"""  %bytes_at = getelementptr <8 x i8>, ptr %packed, i64 %t
  %bytes = load <8 x i8>, ptr %bytes_at, align 1
  %wide = zext <8 x i8> %bytes to <8 x i32>
  %high_nibbles = lshr <8 x i32> %wide, splat (i32 4)
  %low_nibbles = and <8 x i32> %wide, splat (i32 15)
  %codes = shufflevector <8 x i32> %high_nibbles, <8 x i32> %low_nibbles, <16 x i32> <{interleave}>
{_look_up(instructions)}"""
    return _loop(f"four_bit_{output}", "ptr noalias %packed, ptr noalias %book_at", prologue, body, output, False)


_FLOAT8_DECLARATIONS = "declare i1 @llvm.vector.reduce.or.v16i1(<16 x i1>)"


def _float8_loop(name: str, output: str) -> str:
    """<name>_<output>(codes, scales, out, blocks, turns): `blocks` groups of `turns` x 16 codes, each group times
    its scale (already times 2**offset); returns 1 if a code has no value of its own (NaN or infinity), and the
    output is then not to be used."""
    fields = FLOAT8_FIELDS[name]
    moved = (0x8000 | 0x7F << fields.shift) - 0x10000  # the sign bit and the moved fields, as an int16
    body = f"""  %codes_at = getelementptr <16 x i8>, ptr %codes, i64 %t
  %code = load <16 x i8>, ptr %codes_at, align 1
  %marked = or <16 x i8> %code, splat (i8 {(0xFF ^ fields.unmapped) - 0x100})
  %special = icmp eq <16 x i8> %marked, splat (i8 -1)
  %flagged = or <16 x i1> %seen, %special
  %signed = sext <16 x i8> %code to <16 x i16>
  %shifted = shl <16 x i16> %signed, splat (i16 {fields.shift})
  %bf16 = and <16 x i16> %shifted, splat (i16 {moved})
  %wide = zext <16 x i16> %bf16 to <16 x i32>
  %f32_bits = shl <16 x i32> %wide, splat (i32 16)
  %values = bitcast <16 x i32> %f32_bits to <16 x float>
"""
    return _loop(f"{name}_{output}", "ptr noalias %codes", "", body, output, True)
