"""Quantized GGUF blocks made by torch, vectorised over many blocks at once.

Q8_0 is llama.cpp's reference quantizer (`quantize_row_q8_0_ref`) byte for byte. Q4_K, Q5_K and Q6_K are written as
llama.cpp writes them (`quantize_row_q4_K_ref`, `_q5_K_ref`, `_q6_K_ref`; gguf-py's dequantizer reads them) and
choose each sub-block's scale by llama.cpp's own search (`make_qkx2_quants`, `make_qx_quants`), which given all
its steps makes llama.cpp's blocks but for sums added in another order; the export tries a few of the steps and
refits the best levels once, for an error within about 1 % of llama.cpp's at a fraction of its time
(tests/gguf/test_blocks.py; benchmarks/gguf_export.py times both).

Values are quantized in chunks on threads of one torch thread each, every large tensor of a chunk in buffers the
thread keeps: fresh memory for every operation costs more than the arithmetic (page faults), the more so in a
virtual machine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from guiapp.compute.devices import use_cpu_threads

# Values per chunk: big enough that torch's cost per operation (microseconds) is small beside the work, small
# enough that a chunk's float32 buffers (a few of 1 MB) stay in the processor's caches.
_CHUNK = 1 << 18
# The export's search: the steps of llama.cpp's it tries, then refits on the best levels (RMSE of the dequantized
# weights within about 1 % of llama.cpp's full search on normal, heavy-tailed and trained-like matrices).
Q4_K_STEPS = torch.tensor([0.0, 7.0, 14.0, 20.0]) * 0.1 - 1.0
Q4_K_REFITS = 1
Q5_K_STEPS = torch.tensor([0.0, 5.0, 10.0, 15.0]) * 0.1 - 0.5
Q5_K_REFITS = 1
Q6_K_STEPS = torch.tensor([0.0, -8.0, -4.0, 4.0, 8.0]) * 0.1
Q6_K_REFITS = 1

_SCRATCH = threading.local()


def _buffer(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A float32 tensor of `shape` kept by the calling thread under `name` (holding whatever was left in it)."""
    buffers = _SCRATCH.__dict__.setdefault("buffers", {})
    count = 1
    for size in shape:
        count *= size
    kept = buffers.get(name)
    if kept is None or kept.numel() < count:
        kept = buffers[name] = torch.empty(count)
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


def _row_sums(values: torch.Tensor) -> torch.Tensor:
    """The sum of each row of a (B, n) tensor, as a product with a vector of ones (BLAS: faster than torch's sum
    over a short last dimension)."""
    return torch.mv(values, _buffer("ones", (values.shape[1],)).fill_(1.0))


def _level_sums(levels, weights, weighted_x):
    """sum w*l, sum w*l*l and sum w*x*l over the last dimension (`levels` is overwritten)."""
    weighted_l = torch.mul(weights, levels, out=_buffer("weighted levels", tuple(levels.shape)))
    sum_l = _row_sums(weighted_l)
    return sum_l, _row_sums(weighted_l.mul_(levels)), _row_sums(levels.mul_(weighted_x))


def _subblock_scales_and_mins(x: torch.Tensor, top: int, steps: torch.Tensor, refits: int,
                              measure_plain: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """llama.cpp's make_qkx2_quants(32, top, ...) on all sub-blocks `x` (B, 32) at once, with the weights of
    quantize_row_q4_K_ref and _q5_K_ref, trying the steps `steps` in order (llama.cpp's Q4_K tries -1, -0.9, ... 1,
    its Q5_K -0.5, -0.4, ... 1): each
    step's levels are fitted by weighted least squares and, as in llama.cpp, a better fit's min is where the next
    step's levels start from; then `refits` more fits, each on the levels the best scale and min give. With
    `measure_plain`, llama.cpp's first candidate is measured as well. Returns each sub-block's scale and (positive)
    min."""
    shape = tuple(x.shape)
    weights = torch.mul(x, x, out=_buffer("weights", shape))
    rms = weights.mean(dim=1, keepdim=True).sqrt_()
    weights = torch.abs(x, out=weights).add_(rms)
    low = x.amin(dim=1).clamp_(max=0.0)
    high = x.amax(dim=1)
    flat = high == low
    # A flat sub-block (all its values equal and at most 0: a positive one still spans 0..value) keeps scale 0.
    high = torch.where(flat, low + 1.0, high)
    weighted_x = torch.mul(weights, x, out=_buffer("weighted x", shape))
    sum_w, sum_x = _row_sums(weights), _row_sums(weighted_x)
    levels_buffer = _buffer("levels", shape)
    # llama.cpp starts from the plain min-max quantization, kept where no fit does better (or none is possible: all
    # levels equal). Every fit's error is sum(w x^2) - gain: the best fit has the largest gain. Unless asked, the
    # plain quantization's gain is not measured: a fit of the first step's levels nearly always beats it.
    inverse = torch.full_like(low, float(top)) / (high - low)
    scale, minimum = 1.0 / inverse, low
    best = torch.full_like(low, -torch.inf)
    if measure_plain:
        levels = torch.sub(x, low[:, None], out=levels_buffer).mul_(inverse[:, None]).round_().clamp_(0.0, float(top))
        sum_l, sum_ll, sum_xl = _level_sums(levels, weights, weighted_x)
        best = 2 * scale * sum_xl + 2 * minimum * sum_x - scale * scale * sum_ll - 2 * scale * minimum * sum_l - \
            minimum * minimum * sum_w
    for step in steps + float(top):
        levels = torch.sub(x, minimum[:, None], out=levels_buffer).mul_((step / (high - minimum))[:, None])
        levels = levels.round_().clamp_(0.0, float(top))
        scale, minimum, best = _better_fit(levels, weights, weighted_x, sum_w, sum_x, scale, minimum, best)
    for _ in range(refits):
        levels = torch.sub(x, minimum[:, None], out=levels_buffer).div_(scale[:, None]).round_().clamp_(0.0, float(top))
        scale, minimum, best = _better_fit(levels, weights, weighted_x, sum_w, sum_x, scale, minimum, best)
    return torch.where(flat, 0.0, scale), -torch.where(flat, low, minimum)


def _better_fit(levels, weights, weighted_x, sum_w, sum_x, scale, minimum, best):
    """make_qkx2_quants' fit of one candidate's levels: the weighted least-squares scale and min (a positive min
    replaced by 0 and the scale refitted), taken where its gain beats `best` and the fit is not degenerate."""
    sum_l, sum_ll, sum_xl = _level_sums(levels, weights, weighted_x)
    determinant = sum_w * sum_ll - sum_l * sum_l
    fit_scale = (sum_w * sum_xl - sum_x * sum_l) / determinant
    fit_min = (sum_ll * sum_x - sum_l * sum_xl) / determinant
    positive = fit_min > 0
    fit_scale = torch.where(positive, sum_xl / sum_ll, fit_scale)
    fit_min = fit_min.clamp_(max=0.0)
    # At the least-squares fit the error is sum(w x^2) - scale*sum(w x l) - min*sum(w x).
    gain = fit_scale * sum_xl + fit_min * sum_x
    better = (gain > best) & (determinant > 0)
    return (torch.where(better, fit_scale, scale), torch.where(better, fit_min, minimum),
            torch.where(better, gain, best))


def _pack_q4_k_scales(scales: torch.Tensor, mins: torch.Tensor, out: torch.Tensor) -> None:
    """Eight 6-bit scales and eight 6-bit mins per super-block (uint8, (S, 8) each) into Q4_K's 12 bytes `out`: the
    first four of each whole, the last four split into low nibbles (bytes 8-11) and two high bits (on top of
    bytes 0-7)."""
    out[:, 0:4] = scales[:, :4] | ((scales[:, 4:] >> 4) << 6)
    out[:, 4:8] = mins[:, :4] | ((mins[:, 4:] >> 4) << 6)
    out[:, 8:12] = (scales[:, 4:] & 0xF) | ((mins[:, 4:] & 0xF) << 4)


def _min_scaled(x: torch.Tensor, top: int, steps: torch.Tensor, refits: int,
                measure_plain: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K's and Q5_K's common part for super-blocks `x` (S, 8, 32) and levels 0..`top`, as
    quantize_row_q4_K_ref and quantize_row_q5_K_ref make them: the blocks' first 16 bytes (d and dmin as float16,
    the sub-blocks' scales and mins as 6-bit multiples of them), and the levels (float32 (S, 8, 32), in a buffer
    of the calling thread)."""
    count = x.shape[0]
    scales, mins = _subblock_scales_and_mins(x.reshape(-1, 32), top, steps, refits, measure_plain)
    scales, mins = scales.reshape(count, 8), mins.reshape(count, 8)
    max_scale = scales.amax(dim=1, keepdim=True)
    max_min = mins.amax(dim=1, keepdim=True)
    inv_scale = torch.where(max_scale > 0, 63.0 / max_scale, 0.0)
    inv_min = torch.where(max_min > 0, 63.0 / max_min, 0.0)
    scale_levels = torch.round(inv_scale * scales).clamp_(max=63.0)
    min_levels = torch.round(inv_min * mins).clamp_(max=63.0)
    d16, dmin16 = (max_scale / 63.0).to(torch.float16), (max_min / 63.0).to(torch.float16)
    d = d16.float() * scale_levels
    dm = dmin16.float() * min_levels
    # A sub-block whose scale is 0 gets levels 0 (llama.cpp keeps its search's levels there: other bytes, the same
    # values, since they are multiplied by 0).
    used = (d != 0).float()
    levels = torch.add(x, dm[:, :, None], out=_buffer("levels", tuple(x.shape)))
    levels = levels.div_(torch.where(d != 0, d, 1.0)[:, :, None]).round_().clamp_(0.0, float(top))
    header = torch.empty(count, 16, dtype=torch.uint8)
    header[:, 0:2] = d16.view(torch.uint8)
    header[:, 2:4] = dmin16.view(torch.uint8)
    _pack_q4_k_scales(scale_levels.to(torch.uint8), min_levels.to(torch.uint8), header[:, 4:16])
    return header, levels.mul_(used[:, :, None])


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
    out[:, 16:].view(count, 4, 32).copy_(packed)


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
    out[:, 48:].view(count, 4, 32).copy_(packed)
    fifth = highs.view(count, 8, 32).mul_(torch.tensor([2.0 ** bit for bit in range(8)])[None, :, None])
    out[:, 16:48].copy_(fifth.sum(dim=1))


def _q6_k_subblock_scales(x: torch.Tensor, steps: torch.Tensor, refits: int) -> torch.Tensor:
    """llama.cpp's make_qx_quants(16, 32, ..., rmse_type=1) on all sub-blocks `x` (B, 16) at once: levels in
    [-32, 31] for each candidate scale max/-(32 + step) (llama.cpp's steps: 0, then -0.9 ... 0.9), weights x*x,
    the weighted least-squares scale of the candidate with the largest sum(w x l)^2 / sum(w l l); then `refits`
    more fits on the levels the best scale gives. Returns each sub-block's scale (0 where all values are 0)."""
    shape = tuple(x.shape)
    peak = _signed_peak(x)
    empty = peak.abs() < 1e-15
    peak = torch.where(empty, 1.0, peak)
    squared = torch.mul(x, x, out=_buffer("squared", shape))
    cubed = torch.mul(squared, x, out=_buffer("cubed", shape))
    levels_buffer = _buffer("levels", shape)
    scale = torch.zeros_like(peak)
    best = torch.zeros_like(peak)
    for step in steps:
        levels = torch.mul(x, (-(32.0 + step) / peak)[:, None], out=levels_buffer).round_()
        scale, best = _better_q6(squared, cubed, levels, scale, best)
    for _ in range(refits):
        levels = torch.div(x, torch.where(scale != 0, scale, 1.0)[:, None], out=levels_buffer).round_()
        scale, best = _better_q6(squared, cubed, levels, scale, best)
    return torch.where(empty, 0.0, scale)


def _signed_peak(x: torch.Tensor) -> torch.Tensor:
    """Each row's value of largest magnitude, with its sign (the positive one where +a and -a tie; llama.cpp takes
    the first). From the row's max and min: an argmax over magnitudes costs ten times as much."""
    high, low = x.amax(dim=1), x.amin(dim=1)
    return torch.where(high >= -low, high, low)


def _better_q6(squared, cubed, levels, scale, best):
    """One candidate's levels (clamped to [-32, 31] here, then overwritten): its least-squares scale, taken where
    it beats `best`. The products are llama.cpp's, in its order."""
    levels = levels.clamp_(-32.0, 31.0)
    sum_ll = _row_sums(torch.mul(squared, levels, out=_buffer("weighted levels", tuple(levels.shape))).mul_(levels))
    sum_xl = _row_sums(levels.mul_(cubed))
    usable = sum_ll > 0
    fit = sum_xl / torch.where(usable, sum_ll, 1.0)
    gain = fit * sum_xl
    better = usable & (gain > best)
    return torch.where(better, fit, scale), torch.where(better, gain, best)


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
    # A sub-block whose scale is 0 gets level 32 (the value 0).
    used = (d != 0).float()
    levels = torch.div(x, torch.where(d != 0, d, 1.0)[:, :, None], out=_buffer("levels", tuple(x.shape)))
    levels = levels.round_().clamp_(-32.0, 31.0).mul_(used[:, :, None]).add_(32.0)
    # The bytes computed in float32, where they are exact, and converted once: 6-bit level l = 16 h + n.
    highs = torch.mul(levels, 1.0 / 16.0, out=_buffer("highs", tuple(levels.shape))).floor_()
    nibbles = levels.sub_(highs, alpha=16.0).view(count, 2, 4, 32)  # 2 halves of 128, 4 rows of 32 each
    highs = highs.view(count, 2, 4, 32)
    ql = out[:, :128].view(count, 2, 2, 32)
    ql.copy_(torch.add(nibbles[:, :, 0:2], nibbles[:, :, 2:4], alpha=16.0, out=_buffer("ql", (count, 2, 2, 32))))
    qh = torch.add(highs[:, :, 0], highs[:, :, 1], alpha=4.0, out=_buffer("qh", (count, 2, 32)))
    qh.add_(highs[:, :, 2], alpha=16.0).add_(highs[:, :, 3], alpha=64.0)
    out[:, 128:192].view(count, 2, 32).copy_(qh)
    out[:, 192:208].view(torch.int8).copy_(scale_levels)
    out[:, 208:210] = d16.view(torch.uint8)
    if bool(empty.any()):
        out[empty[:, 0]] = 0  # llama.cpp writes a block of zeros where every value is (nearly) 0


def in_chunks(values: torch.Tensor, kernel: Callable[[torch.Tensor, torch.Tensor], None], block_values: int,
              block_bytes: int, threads: int) -> torch.Tensor:
    """`kernel` applied to flat float32 `values` (a multiple of `block_values`) in chunks of whole blocks, on
    `threads` threads of one torch thread each (threads of their own even for one: torch splitting each small
    operation over threads makes them wait for each other, many times slower on a busy machine); the blocks'
    bytes, flat, in order. Raises ValueError when a row (the last dimension) is not a whole number of blocks: a
    block never spans two rows."""
    if values.shape[-1] % block_values:
        raise ValueError(f"Rows of {values.shape[-1]} values are not whole blocks of {block_values}.")
    flat = values.reshape(-1)
    blocks = flat.numel() // block_values
    out = torch.empty(blocks, block_bytes, dtype=torch.uint8)
    per_chunk = max(1, _CHUNK // block_values)
    starts = range(0, blocks, per_chunk)

    def run(start: int) -> None:
        end = min(start + per_chunk, blocks)
        kernel(flat[start * block_values:end * block_values], out[start:end])

    with ThreadPoolExecutor(max(1, min(threads, len(starts))), "mergesmith-quantize", initializer=use_cpu_threads,
                            initargs=(1,)) as pool:
        list(pool.map(run, starts))
    return out.reshape(-1)
