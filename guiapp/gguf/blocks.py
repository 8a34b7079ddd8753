"""Quantized GGUF blocks made by torch, vectorised over many blocks at once.

Q8_0 is llama.cpp's reference quantizer (`quantize_row_q8_0_ref`) byte for byte. Q4_K, Q5_K and Q6_K are written as
llama.cpp writes them (`quantize_row_q4_K_ref`, `_q5_K_ref`, `_q6_K_ref`; gguf-py's dequantizer reads them) and
choose each sub-block's scale by llama.cpp's own search (`make_qkx2_quants`, `make_qx_quants`), which given all
its steps makes llama.cpp's blocks but for sums added in another order; the export tries a few of the steps
(Q4_K three and a refit of the best levels, Q5_K four and a refit, Q6_K two), for an error within about 1.5 % of
llama.cpp's (Q6_K 0.3 %) at a fraction of its time (tests/gguf/test_blocks.py; benchmarks/gguf_export.py times
both). Each step costs about 2 ns a value on one core of the benchmark's machine, torch's work on whole chunks.

Values are quantized in chunks on threads of one torch thread each, every large tensor of a chunk in buffers the
thread keeps: fresh memory for every operation costs more than the arithmetic (page faults), the more so in a
virtual machine. What is computed once per sub-block (the fits' arithmetic) works on stacked rows, fewer
operations: on 16-32 thousand values each, torch's cost per operation counts more than the arithmetic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from guiapp.compute.devices import use_cpu_threads

# Values per chunk: big enough that torch's cost per operation (microseconds) is small beside the work, small
# enough that a chunk's float32 buffers (a few of 2 MB) stay in the processor's caches. On the 2-core workstation
# of benchmarks/gguf_export.py, a Q4_K chunk of 2^17, 2^18, 2^19 and 2^20 values took 14.4, 12.4, 11.8 and 12.6 ns
# a value on one thread (Q6_K: 9.5, 7.4, 7.2, 8.4).
_CHUNK = 1 << 19
# The export's search: the steps of llama.cpp's it tries, then refits on the best levels (RMSE of the dequantized
# weights above llama.cpp's full search's on normal, heavy-tailed and trained-like matrices: Q4_K 0.8-1.5 %, each
# step less costing 0.3-0.4 % more; Q5_K 0.2-0.8 %; Q6_K 0.0-0.3 %, where its steps 0 and -0.9 are the ones that
# count: with -0.5 and 0.5 instead of -0.9 it was 1-3 %). The steps were chosen by a search over llama.cpp's.
Q4_K_STEPS = torch.tensor([0.0, 8.0, 14.0], dtype=torch.float32) * 0.1 - 1.0
Q4_K_REFITS = 1
Q5_K_STEPS = torch.tensor([0.0, 5.0, 10.0, 15.0], dtype=torch.float32) * 0.1 - 0.5
Q5_K_REFITS = 1
Q6_K_STEPS = torch.tensor([0.0, -9.0], dtype=torch.float32) * 0.1
Q6_K_REFITS = 0
# Q5_K's fifth bits: sub-block p's high bit weighs 2**p in its byte.
_FIFTH_BIT_WEIGHTS = (2.0 ** torch.arange(8, dtype=torch.float32))[None, :, None]

_SCRATCH = threading.local()


def _buffer(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A float32 tensor of `shape` kept by the calling thread under `name` (holding whatever was left in it)."""
    buffers = _SCRATCH.__dict__.setdefault("buffers", {})
    count = 1
    for size in shape:
        count *= size
    kept = buffers.get(name)
    if kept is None or kept.numel() < count:
        kept = buffers[name] = torch.empty(count, dtype=torch.float32)
    return kept[:count].view(shape)


# The float32 just below 0.5: a + it, rounded to float32, then floored, is C's roundf(a) for every float32 a >= 0
# (the sum reaches the next integer only when a's fraction is at least 0.5; with 0.5 itself, 0.49999997 would
# become 1). Checked against every float32 up to 128.5, the range Q8_0 rounds.
_JUST_BELOW_HALF = 0.5 - 2.0 ** -25


def _round_magnitude(magnitudes: torch.Tensor) -> torch.Tensor:
    """Non-negative values rounded in place as C's roundf rounds them, halves up (torch.round takes them to even,
    and its trunc is several times slower than floor)."""
    return magnitudes.add_(_JUST_BELOW_HALF).floor_()


def _fp16_bytes(values: torch.Tensor) -> torch.Tensor:
    """float32 values rounded to float16 (to nearest, ties to even, as ggml's FP32_TO_FP16), two bytes each."""
    return values.to(torch.float16).contiguous().view(torch.uint8).reshape(*values.shape, 2)


def q8_0(values: torch.Tensor, out: torch.Tensor) -> None:
    """Flat float32 `values` (a multiple of 32) as Q8_0 blocks into `out` ((blocks, 34) bytes): the scale amax/127
    as float16, then the 32 values divided by it and rounded as llama.cpp rounds them."""
    blocks = values.reshape(-1, 32)
    magnitudes = torch.abs(blocks, out=_buffer("magnitudes", tuple(blocks.shape)))
    scale = magnitudes.amax(dim=1, keepdim=True).div_(127.0)
    inverse = 1.0 / scale
    # A scale of 0, or one so small that its inverse overflows (its float16 is 0 anyway): every code 0, defined
    # where C's conversion of an infinity to int8 is not.
    inverse = torch.where(torch.isfinite(inverse), inverse, 0.0)
    rounded = _round_magnitude(magnitudes.mul_(inverse))
    out[:, :2] = _fp16_bytes(scale[:, 0])
    out[:, 2:].view(torch.int8).copy_(torch.copysign(rounded, blocks, out=rounded))


def _ones(count: int) -> torch.Tensor:
    """`count` ones, kept by the calling thread (never written to)."""
    kept = _SCRATCH.__dict__.setdefault("ones", {})
    if count not in kept:
        kept[count] = torch.ones(count, dtype=torch.float32)
    return kept[count]


def _row_sums(values: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The sum of each row of a (B, n) tensor, as a product with a vector of ones (BLAS: faster than torch's sum
    over a short last dimension), into `out` when given."""
    return torch.mv(values, _ones(values.shape[1]), out=out)


def _as_bytes(values: torch.Tensor, out: torch.Tensor) -> None:
    """Float32 `values` holding whole numbers 0..255 (or -128..127 for an int8 `out`) written into `out`, of the
    same shape (NumPy's conversion: torch's from float32 to 8 bits is several times slower)."""
    np.copyto(out.numpy(), values.numpy(), casting="unsafe")


def _subblock_scales_and_mins(x: torch.Tensor, top: int, steps: torch.Tensor, refits: int,
                              measure_plain: bool) -> torch.Tensor:
    """llama.cpp's make_qkx2_quants(32, top, ...) on all sub-blocks `x` (B, 32) at once, with the weights of
    quantize_row_q4_K_ref and _q5_K_ref, trying the steps `steps` in order (llama.cpp's Q4_K tries -1, -0.9, ... 1,
    its Q5_K -0.5, -0.4, ... 1): each
    step's levels are fitted by weighted least squares and, as in llama.cpp, a better fit's min is where the next
    step's levels start from; then `refits` more fits, each on the levels the best scale and min give. With
    `measure_plain`, llama.cpp's first candidate is measured as well. Returns each sub-block's scale and (positive)
    min, the rows of a (2, B) tensor."""
    count = x.shape[0]
    shape = tuple(x.shape)
    weights = torch.mul(x, x, out=_buffer("weights", shape))
    rms = weights.mean(dim=1).sqrt_()
    weights = torch.abs(x, out=weights).add_(rms[:, None])
    weighted_x = torch.mul(weights, x, out=_buffer("weighted x", shape))
    low = x.amin(dim=1).clamp_(max=0.0)
    high = x.amax(dim=1)
    flat = high == low
    # A flat sub-block (all its values equal and at most 0: a positive one still spans 0..value) keeps scale 0.
    high = torch.where(flat, low + 1.0, high)
    # The sums every fit needs, in rows laid out so that the fit takes few operations (see _better_fit):
    # sum w*l*l, sum w, sum w*x, sum w*x*l, sum w*x again, sum w*l.
    sums = _buffer("sums", (6, count))
    _row_sums(weights, sums[1])
    _row_sums(weighted_x, sums[2])
    sums[4].copy_(sums[2])
    # The best fit so far: its min, scale and gain. llama.cpp starts from the plain min-max quantization, kept where
    # no fit does better (or none is possible: all levels equal). Every fit's error is sum(w x^2) - gain: the best
    # fit has the largest gain. Unless asked, the plain quantization's gain is not measured: a fit of the first
    # step's levels nearly always beats it.
    best = _buffer("best fit", (3, count))
    # Divisions of tensors, as llama.cpp divides: a Python number over a tensor is a product with a reciprocal.
    inverse = torch.full_like(low, float(top)) / (high - low)
    best[0] = low
    torch.reciprocal(inverse, out=best[1])
    best[2] = -torch.inf
    levels_buffer = _buffer("levels", shape)
    if measure_plain:
        levels = torch.sub(x, low[:, None], out=levels_buffer).mul_(inverse[:, None]).round_().clamp_(0.0, float(top))
        _level_sums(levels, weights, weighted_x, sums)
        scale, minimum = best[1], best[0]
        sum_ll, sum_w, sum_x, sum_xl, _, sum_l = sums
        best[2] = 2 * scale * sum_xl + 2 * minimum * sum_x - scale * scale * sum_ll - 2 * scale * minimum * sum_l - \
            minimum * minimum * sum_w
    candidate = _buffer("candidate fit", (3, count))
    for step in steps + float(top):
        minimum = best[0]
        levels = torch.sub(x, minimum[:, None], out=levels_buffer).mul_((step / (high - minimum))[:, None])
        _better_fit(levels.round_().clamp_(0.0, float(top)), weights, weighted_x, sums, best, candidate)
    for _ in range(refits):
        levels = torch.sub(x, best[0][:, None], out=levels_buffer).div_(best[1][:, None])
        _better_fit(levels.round_().clamp_(0.0, float(top)), weights, weighted_x, sums, best, candidate)
    scales_and_mins = torch.empty(2, count, dtype=torch.float32)
    torch.where(flat, best[1].new_zeros(()), best[1], out=scales_and_mins[0])
    torch.where(flat, low, best[0], out=scales_and_mins[1]).neg_()
    return scales_and_mins


def _level_sums(levels, weights, weighted_x, sums) -> None:
    """sum w*l*l, sum w*x*l and sum w*l over the last dimension into rows 0, 3 and 5 of `sums` (`levels` is
    overwritten)."""
    weighted_l = torch.mul(weights, levels, out=_buffer("weighted levels", tuple(levels.shape)))
    _row_sums(weighted_l, sums[5])
    _row_sums(weighted_l.mul_(levels), sums[0])
    _row_sums(levels.mul_(weighted_x), sums[3])


def _better_fit(levels, weights, weighted_x, sums, best, candidate) -> None:
    """make_qkx2_quants' fit of one candidate's levels: the weighted least-squares min and scale (a positive min
    replaced by 0 and the scale refitted), taken into `best` (min, scale, gain) where its gain is larger and the fit
    is not degenerate. Works on stacked rows of `sums`, `best` and `candidate`: torch's cost per operation, not
    the arithmetic, is what counts on one value per sub-block."""
    _level_sums(levels, weights, weighted_x, sums)
    sum_ll, sum_w, sum_x, sum_xl, _, sum_l = sums
    # Products and differences rounded one by one as llama.cpp's (a fused multiply-add rounds once, and the
    # determinant cancels).
    determinant = torch.mul(sum_w, sum_ll).sub_(sum_l * sum_l)
    # [sum_ll, sum_w] * [sum_x, sum_xl] - sum_l * [sum_xl, sum_x]: the least-squares min and scale, times the
    # determinant.
    fit = torch.mul(sums[0:2], sums[2:4], out=candidate[0:2]).sub_(sum_l * sums[3:5]).div_(determinant)
    fit_min, fit_scale = fit
    torch.where(fit_min > 0, sum_xl / sum_ll, fit_scale, out=fit_scale)
    fit_min.clamp_(max=0.0)
    # At the least-squares fit the error is sum(w x^2) - scale*sum(w x l) - min*sum(w x).
    gain = torch.mul(fit_min, sum_x, out=candidate[2]).add_(fit_scale * sum_xl)
    better = (gain > best[2]).logical_and_(determinant > 0)
    torch.where(better, candidate, best, out=best)


def _min_scaled(x: torch.Tensor, top: int, steps: torch.Tensor, refits: int,
                measure_plain: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K's and Q5_K's common part for super-blocks `x` (S, 8, 32) and levels 0..`top`, as
    quantize_row_q4_K_ref and quantize_row_q5_K_ref make them: the blocks' first 16 bytes (d and dmin as float16,
    the sub-blocks' scales and mins as 6-bit multiples of them), and the levels (float32 (S, 8, 32), in a buffer
    of the calling thread). Scales and mins go through the same operations stacked, (2, S, 8)."""
    count = x.shape[0]
    pairs = _subblock_scales_and_mins(x.reshape(-1, 32), top, steps, refits, measure_plain).view(2, count, 8)
    peaks = pairs.amax(dim=2, keepdim=True)
    six_bits = torch.round(torch.where(peaks > 0, 63.0 / peaks, 0.0) * pairs).clamp_(max=63.0)
    halves = (peaks / 63.0).to(torch.float16)  # d and dmin
    d, dm = halves.float() * six_bits
    # A sub-block whose scale is 0 gets levels 0, from an inverse of 0 (llama.cpp keeps its search's levels there:
    # other bytes, the same values, since they are multiplied by 0). Multiplying by the inverse rather than dividing
    # by d changes a level only where (x + dm) / d is within a rounding of a half.
    inverse = torch.where(d != 0, 1.0 / d, 0.0)
    levels = torch.add(x, dm[:, :, None], out=_buffer("levels", tuple(x.shape)))
    levels = levels.mul_(inverse[:, :, None]).round_().clamp_(0.0, float(top))
    header = torch.empty(count, 16, dtype=torch.uint8)
    header[:, 0:4].view(torch.float16).copy_(halves[:, :, 0].T)
    # Eight 6-bit scales and eight 6-bit mins in 12 bytes: the first four of each whole, the last four split into
    # low nibbles (bytes 8-11, the scale's below the min's) and two high bits (on top of bytes 0-7). Computed in
    # float32, exact on these whole numbers, and converted once.
    high = torch.mul(six_bits[:, :, 4:], 1.0 / 16.0).floor_()
    low = torch.sub(six_bits[:, :, 4:], high, alpha=16.0)
    _as_bytes(high.mul_(64.0).add_(six_bits[:, :, :4]).permute(1, 0, 2), header[:, 4:12].view(count, 2, 4))
    _as_bytes(torch.add(low[0], low[1], alpha=16.0), header[:, 12:16])
    return header, levels


def q4_k(values: torch.Tensor, out: torch.Tensor, steps: torch.Tensor = Q4_K_STEPS, refits: int = Q4_K_REFITS,
         measure_plain: bool = False) -> None:
    """Flat float32 `values` (a multiple of 256) as Q4_K super-blocks into `out` ((S, 144) bytes): d and dmin
    (float16), the 12 bytes of 6-bit sub-block scales and mins, 128 bytes of 4-bit levels (two 32-value sub-blocks
    per 32 bytes, low nibble first), as quantize_row_q4_K_ref writes them. With llama.cpp's steps (-1, -0.9, ... 1),
    no refit and `measure_plain`, the scales are llama.cpp's."""
    x = values.reshape(-1, 8, 32)
    count = x.shape[0]
    header, levels = _min_scaled(x, 15, steps, refits, measure_plain)
    out[:, :16] = header
    pairs = levels.view(count, 4, 2, 32)
    # Two levels per byte, low nibble first: l0 + 16*l1 is that byte, exact in float32.
    packed = torch.add(pairs[:, :, 0, :], pairs[:, :, 1, :], alpha=16, out=_buffer("packed", (count, 4, 32)))
    _as_bytes(packed, out[:, 16:].view(count, 4, 32))


def q5_k(values: torch.Tensor, out: torch.Tensor, steps: torch.Tensor = Q5_K_STEPS, refits: int = Q5_K_REFITS,
         measure_plain: bool = False) -> None:
    """Flat float32 `values` (a multiple of 256) as Q5_K super-blocks into `out` ((S, 176) bytes), as
    quantize_row_q5_K_ref writes them: Q4_K's 16 bytes of d, dmin and 6-bit scales and mins, 32 bytes of fifth
    bits (bit 2p of byte j: value j of sub-block 2p, bit 2p+1: of sub-block 2p+1), 128 bytes of the low four bits
    as Q4_K's. With llama.cpp's steps (-0.5, -0.4, ... 1), no refit and `measure_plain`, the scales are
    llama.cpp's."""
    x = values.reshape(-1, 8, 32)
    count = x.shape[0]
    header, levels = _min_scaled(x, 31, steps, refits, measure_plain)
    out[:, :16] = header
    # The bytes computed in float32, where they are exact, and converted once: 5-bit level l = 16 h + n.
    highs = torch.mul(levels, 1.0 / 16.0, out=_buffer("highs", tuple(levels.shape))).floor_()
    nibbles = levels.sub_(highs, alpha=16.0).view(count, 4, 2, 32)
    packed = torch.add(nibbles[:, :, 0, :], nibbles[:, :, 1, :], alpha=16, out=_buffer("packed", (count, 4, 32)))
    _as_bytes(packed, out[:, 48:].view(count, 4, 32))
    fifth = highs.view(count, 8, 32).mul_(_FIFTH_BIT_WEIGHTS)
    _as_bytes(fifth.sum(dim=1), out[:, 16:48])


def _q6_k_subblock_scales(x: torch.Tensor, steps: torch.Tensor, refits: int) -> torch.Tensor:
    """llama.cpp's make_qx_quants(16, 32, ..., rmse_type=1) on all sub-blocks `x` (B, 16) at once: levels in
    [-32, 31] for each candidate scale max/-(32 + step) (llama.cpp's steps: 0, then -0.9 ... 0.9), weights x*x,
    the weighted least-squares scale of the candidate with the largest sum(w x l)^2 / sum(w l l); then `refits`
    more fits on the levels the best scale gives. Returns each sub-block's scale (0 where all values are 0).

    The search runs on the sub-blocks transposed, (16, B): torch reduces rows of 16 values ten times slower than
    it reduces 16 rows of B values, and the transposition costs less than the difference."""
    count = x.shape[0]
    shape = (x.shape[1], count)
    columns = _buffer("transposed", shape)
    np.copyto(columns.numpy(), x.numpy().T)  # NumPy transposes faster than torch
    high, low = columns.amax(dim=0), columns.amin(dim=0)
    peak = torch.where(high >= -low, high, low)  # the positive one where +a and -a tie; llama.cpp takes the first
    empty = peak.abs() < 1e-15
    peak = torch.where(empty, 1.0, peak)
    squared = torch.mul(columns, columns, out=_buffer("squared", shape))
    cubed = torch.mul(squared, columns, out=_buffer("cubed", shape))
    levels_buffer = _buffer("levels", shape)
    best = _buffer("best fit", (2, count)).zero_()  # scale, gain
    candidate = _buffer("candidate fit", (2, count))
    for step in steps:
        levels = torch.mul(columns, -(32.0 + step) / peak, out=levels_buffer).round_()
        _better_q6(squared, cubed, levels, best, candidate)
    for _ in range(refits):
        levels = torch.div(columns, torch.where(best[0] != 0, best[0], 1.0), out=levels_buffer).round_()
        _better_q6(squared, cubed, levels, best, candidate)
    return torch.where(empty, 0.0, best[0])


def _signed_peak(x: torch.Tensor) -> torch.Tensor:
    """Each row's value of largest magnitude, with its sign (the positive one where +a and -a tie; llama.cpp takes
    the first). From the row's max and min: an argmax over magnitudes costs ten times as much."""
    high, low = x.amax(dim=1), x.amin(dim=1)
    return torch.where(high >= -low, high, low)


def _better_q6(squared, cubed, levels, best, candidate) -> None:
    """One candidate's levels (16, B), clamped to [-32, 31] here, then overwritten: its least-squares scale, taken
    into `best` (scale, gain) where its gain is larger. The products are llama.cpp's, in its order. Where all
    levels are 0, sum(w l l) and sum(w x l) are both 0: the scale 0/0 is not a number, and never larger."""
    levels = levels.clamp_(-32.0, 31.0)
    weighted_l = torch.mul(squared, levels, out=_buffer("weighted levels", tuple(levels.shape)))
    sum_ll = torch.sum(weighted_l.mul_(levels), dim=0, out=candidate[1])
    sum_xl = torch.sum(levels.mul_(cubed), dim=0)
    torch.div(sum_xl, sum_ll, out=candidate[0])
    gain = sum_ll.copy_(candidate[0]).mul_(sum_xl)
    torch.where(gain > best[1], candidate, best, out=best)


def q6_k(values: torch.Tensor, out: torch.Tensor, steps: torch.Tensor = Q6_K_STEPS, refits: int = Q6_K_REFITS) -> None:
    """Flat float32 `values` (a multiple of 256) as Q6_K super-blocks into `out` ((S, 210) bytes), as
    quantize_row_q6_K_ref writes them: 128 bytes of low nibbles, 64 of high bit pairs, 16 signed 8-bit sub-block
    scales, d (float16)."""
    x = values.reshape(-1, 16, 16)
    count = x.shape[0]
    scales = _q6_k_subblock_scales(x.reshape(-1, 16), steps, refits).reshape(count, 16)
    max_scale = _signed_peak(scales)[:, None]
    empty = max_scale.abs() < 1e-15
    inverse = -128.0 / torch.where(empty, 1.0, max_scale)
    d16 = torch.where(empty, 0.0, 1.0 / inverse).to(torch.float16)
    scale_levels = torch.round(inverse * scales).clamp_(max=127.0).masked_fill_(empty, 0.0)
    d = d16.float() * scale_levels
    # A sub-block whose scale is 0 gets level 32 (the value 0), from an inverse of 0.
    level_inverse = torch.where(d != 0, 1.0 / d, 0.0)
    levels = torch.mul(x, level_inverse[:, :, None], out=_buffer("levels", tuple(x.shape)))
    levels = levels.round_().clamp_(-32.0, 31.0).add_(32.0)
    # The bytes computed in float32, where they are exact, and converted once: 6-bit level l = 16 h + n.
    highs = torch.mul(levels, 1.0 / 16.0, out=_buffer("highs", tuple(levels.shape))).floor_()
    nibbles = levels.sub_(highs, alpha=16.0).view(count, 2, 4, 32)  # 2 halves of 128, 4 rows of 32 each
    highs = highs.view(count, 2, 4, 32)
    ql = torch.add(nibbles[:, :, 0:2], nibbles[:, :, 2:4], alpha=16.0, out=_buffer("ql", (count, 2, 2, 32)))
    _as_bytes(ql, out[:, :128].view(count, 2, 2, 32))
    qh = torch.add(highs[:, :, 0], highs[:, :, 1], alpha=4.0, out=_buffer("qh", (count, 2, 32)))
    qh.add_(highs[:, :, 2], alpha=16.0).add_(highs[:, :, 3], alpha=64.0)
    _as_bytes(qh, out[:, 128:192].view(count, 2, 32))
    out[:, 192:208].view(torch.int8).copy_(scale_levels)
    out[:, 208:210] = d16.view(torch.uint8)
    if bool(empty.any()):
        out[empty[:, 0]] = 0  # llama.cpp writes a block of zeros where every value is (nearly) 0


def quantizing_threads(count: int) -> ThreadPoolExecutor:
    """A pool of `count` threads of one torch thread each, for `in_chunks`. A caller that quantizes many pieces
    (an export: a block of rows at a time) keeps one for all of them, so that its threads keep their buffers: new
    threads fault theirs in afresh (a 1 GB model's q4_k_m export made 100-140 thousand page faults more, 0.5-1 s of
    system time, with threads of their own for each block)."""
    return ThreadPoolExecutor(max(1, count), "mergesmith-quantize", initializer=use_cpu_threads, initargs=(1,))


def in_chunks(values: torch.Tensor, kernel: Callable[[torch.Tensor, torch.Tensor], None], block_values: int,
              block_bytes: int, threads: int, pool: ThreadPoolExecutor | None = None) -> torch.Tensor:
    """`kernel` applied to flat float32 `values` (a multiple of `block_values`) in chunks of whole blocks, on
    `threads` threads of one torch thread each (threads of their own even for one: torch splitting each small
    operation over threads makes them wait for each other, many times slower on a busy machine), `threads` of
    those of `pool` (see `quantizing_threads`) when given; the blocks' bytes, flat, in order. Raises ValueError when a row (the last
    dimension) is not a whole number of blocks: a block never spans two rows."""
    if values.shape[-1] % block_values:
        raise ValueError(f"Rows of {values.shape[-1]} values are not whole blocks of {block_values}.")
    flat = values.reshape(-1)
    blocks = flat.numel() // block_values
    out = torch.empty(blocks, block_bytes, dtype=torch.uint8)
    # Whole chunks for every thread when the values are few (a small tensor would leave a thread idle).
    per_chunk = max(1, min(_CHUNK // block_values, -(-blocks // max(1, threads))))
    starts = range(0, blocks, per_chunk)

    def run(start: int) -> None:
        end = min(start + per_chunk, blocks)
        kernel(flat[start * block_values:end * block_values], out[start:end])

    workers = max(1, min(threads, len(starts)))
    if pool is None:
        with quantizing_threads(workers) as own:
            list(own.map(run, starts))
        return out.reshape(-1)
    # `threads` workers on the pool's threads (a pool may have more: the threads free now can be fewer than when it
    # was made), each taking the next chunk until none is left.
    pending = iter(starts)
    taking = threading.Lock()

    def work() -> None:
        while True:
            with taking:
                start = next(pending, None)
            if start is None:
                return
            run(start)

    for done in [pool.submit(work) for _ in range(workers)]:
        done.result()
    return out.reshape(-1)
