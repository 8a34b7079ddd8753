"""Q4_K, Q5_K and Q6_K blocks compiled by numba: the search and the bytes of guiapp/gguf/blocks.py's torch kernels,
one super-block at a time.

torch works on whole chunks, about ten passes over buffers larger than the cache for every step of the search, and
holds Python's lock between its operations, so two quantizing threads ran 1.3-1.4 times as fast as one. Here each
super-block's 256 values stay in the processor's registers and first cache through every step, and the kernels
release Python's lock: about twice as fast on one core, and as many times faster as there are threads.

A Q4_K or Q5_K block differs from the torch kernel's only where a sum added (and w*x*l multiplied: (w*l)*x here, as
llama.cpp, l*(w*x) there) in another order moves a level across a rounding; Q6_K's are computed in the same order:
the same bytes (tests/gguf/test_blocks.py checks both against llama.cpp's reference code). Where numba does not
install (no wheel for Intel Macs), guiapp.gguf.quantize uses the torch kernels.

numba compiles the kernels on their first call (about 4 s, once a machine) and keeps them in its cache beside this
module (or, where that folder cannot be written, in the user's cache), from which later processes load them in a
few tenths of a second. Its cache is keyed on this file alone: what the kernels call lives here too.
"""

from __future__ import annotations

import sys

import numba
import numpy as np
import torch

from guiapp.gguf import blocks

# Kernels release Python's lock, so threads running them run at once. Division follows IEEE arithmetic, as torch's
# (a sub-block of values so small that its sums underflow divides by zero, and gets scale 0, not an exception).
# A frozen app compiles on each start: numba would key its cache on the executable, whose size and date an update of
# the app may keep, and load the kernels of the version before.
_KERNEL = {"nogil": True, "error_model": "numpy", "cache": not getattr(sys, "frozen", False)}
# For sums that may be added in any order (vectorised).
_SUMS = {**_KERNEL, "fastmath": {"reassoc", "nsz"}}


@numba.njit(**_KERNEL)
def _nearest(value):
    """The nearest whole number, halves to even: llama.cpp's nearest_int, and torch.round."""
    return np.float32(np.rint(value))


@numba.njit(**_KERNEL)
def _float16_bits(value):
    """The IEEE half-precision bits of a float32, rounded to nearest, ties to even, as torch and ggml round."""
    word = np.int64(np.float32(value).view(np.uint32))
    sign = (word >> 16) & 0x8000
    exponent = (word >> 23) & 0xFF
    mantissa = word & 0x7FFFFF
    if exponent == 0xFF:
        return sign | 0x7C00 | ((0x200 | mantissa >> 13) if mantissa else 0)
    half_exponent = exponent - 112
    if half_exponent >= 31:
        return sign | 0x7C00
    if half_exponent <= 0:
        if half_exponent < -10:
            return sign
        mantissa |= 0x800000
        shift = 14 - half_exponent
    else:
        mantissa |= half_exponent << 23
        shift = 13
    result = mantissa >> shift
    rest = mantissa & ((1 << shift) - 1)
    halfway = 1 << (shift - 1)
    if rest > halfway or (rest == halfway and result & 1):
        result += 1
    return sign | result


@numba.njit(**_KERNEL)
def _float16_value(bits):
    """The float32 value of half-precision `bits`."""
    exponent = (bits >> 10) & 0x1F
    mantissa = bits & 0x3FF
    if exponent == 0x1F:
        magnitude = np.float32(np.nan) if mantissa else np.float32(np.inf)
    elif exponent == 0:
        magnitude = np.float32(mantissa) * np.float32(2.0 ** -24)
    else:
        magnitude = np.float32((1024 + mantissa) * 2.0 ** (exponent - 25))
    return -magnitude if bits & 0x8000 else magnitude


@numba.njit(**_KERNEL)
def _load(values, start, bfloat16, block):
    """The 256 values of a super-block from `start` into the float32 `block`: `values` is float32, or the bits of
    bfloat16 values (uint16) when `bfloat16`, widened here (exactly) rather than in a pass of their own."""
    source = values[start:start + 256]
    if bfloat16:
        for i in range(256):
            block[i] = np.uint32(np.uint32(source[i]) << 16).view(np.float32)
    else:
        for i in range(256):
            block[i] = source[i]


@numba.njit(**_SUMS)
def _weights(x, weights):
    """quantize_row_q4_K_ref's weights (rms + |x|) into `weights`; returns min (at most 0), max, sum w, sum w*x."""
    sum_x2 = np.float32(0.0)
    for i in range(x.shape[0]):
        sum_x2 += x[i] * x[i]
    rms = np.sqrt(sum_x2 / np.float32(x.shape[0]))
    low, high = x[0], x[0]
    for i in range(x.shape[0]):
        low = min(low, x[i])
        high = max(high, x[i])
    sum_w, sum_x = np.float32(0.0), np.float32(0.0)
    for i in range(x.shape[0]):
        weight = np.abs(x[i]) + rms
        weights[i] = weight
        sum_w += weight
        sum_x += weight * x[i]
    return min(low, np.float32(0.0)), high, sum_w, sum_x


@numba.njit(**_KERNEL)
def _levels(x, offset, factor, top, levels):
    """round((x - offset) * factor), clamped to 0..top, into `levels`."""
    for i in range(x.shape[0]):
        levels[i] = min(max(_nearest((x[i] - offset) * factor), np.float32(0.0)), top)


@numba.njit(**_SUMS)
def _level_sums(x, weights, offset, factor, divide, top):
    """The levels round((x - offset) * factor), or round((x - offset) / factor) when `divide`, clamped to 0..top:
    their sums w*l, w*l*l and w*x*l (the levels themselves are not kept: the search needs only these)."""
    sum_l, sum_ll, sum_xl = np.float32(0.0), np.float32(0.0), np.float32(0.0)
    for i in range(x.shape[0]):
        shifted = x[i] - offset
        level = min(max(_nearest(shifted / factor if divide else shifted * factor), np.float32(0.0)), top)
        weighted = weights[i] * level
        sum_l += weighted
        sum_ll += weighted * level
        sum_xl += weighted * x[i]
    return sum_l, sum_ll, sum_xl


@numba.njit(**_KERNEL)
def _scale_and_min(x, top, steps, refits, measure_plain, weights):
    """make_qkx2_quants as blocks._subblock_scales_and_mins does it, for one sub-block: (scale, positive min)."""
    low, high, sum_w, sum_x = _weights(x, weights)
    if high == low:  # flat, at most 0
        return np.float32(0.0), -low
    inverse = top / (high - low)
    best_min, best_scale, best_gain = low, np.float32(1.0) / inverse, np.float32(-np.inf)
    if measure_plain:
        sum_l, sum_ll, sum_xl = _level_sums(x, weights, low, inverse, False, top)
        scale, minimum = best_scale, best_min
        two = np.float32(2.0)
        best_gain = two * scale * sum_xl + two * minimum * sum_x - scale * scale * sum_ll - \
            two * scale * minimum * sum_l - minimum * minimum * sum_w
    for attempt in range(steps.shape[0] + refits):
        if attempt < steps.shape[0]:
            sum_l, sum_ll, sum_xl = _level_sums(x, weights, best_min, (steps[attempt] + top) / (high - best_min), False,
                                                top)
        else:
            sum_l, sum_ll, sum_xl = _level_sums(x, weights, best_min, best_scale, True, top)
        determinant = sum_w * sum_ll - sum_l * sum_l
        if determinant > 0:
            fit_min = (sum_ll * sum_x - sum_l * sum_xl) / determinant
            fit_scale = (sum_w * sum_xl - sum_l * sum_x) / determinant
            if fit_min > 0:
                fit_min, fit_scale = np.float32(0.0), sum_xl / sum_ll
            gain = fit_min * sum_x + fit_scale * sum_xl
            if gain > best_gain:
                best_min, best_scale, best_gain = fit_min, fit_scale, gain
    return best_scale, -best_min


@numba.njit(**_KERNEL)
def _min_scaled_blocks(values, bfloat16, out, top, steps, refits, measure_plain):
    """Q4_K super-blocks (levels 0..15) or Q5_K ones (0..31, `top`) of `values` (see `_load`) into `out` (S, 144
    or 176 bytes): d and dmin, the 6-bit scales and mins, then the levels packed as blocks.q4_k and blocks.q5_k
    pack them."""
    block_values = np.empty(256, np.float32)
    weights = np.empty(32, np.float32)
    levels = np.empty(256, np.float32)
    scales = np.empty(8, np.float32)
    mins = np.empty(8, np.float32)
    six_bit_scales = np.empty(8, np.int64)
    six_bit_mins = np.empty(8, np.int64)
    for block in range(out.shape[0]):
        _load(values, block * 256, bfloat16, block_values)
        for j in range(8):
            x = block_values[32 * j:32 * j + 32]
            scales[j], mins[j] = _scale_and_min(x, top, steps, refits, measure_plain, weights)
        peak_scale, peak_min = scales.max(), mins.max()
        scale_factor = np.float32(63.0) / peak_scale if peak_scale > 0 else np.float32(0.0)
        min_factor = np.float32(63.0) / peak_min if peak_min > 0 else np.float32(0.0)
        for j in range(8):
            six_bit_scales[j] = np.int64(min(_nearest(scale_factor * scales[j]), np.float32(63.0)))
            six_bit_mins[j] = np.int64(min(_nearest(min_factor * mins[j]), np.float32(63.0)))
        d_bits = _float16_bits(peak_scale / np.float32(63.0))
        dmin_bits = _float16_bits(peak_min / np.float32(63.0))
        row = out[block]
        row[0], row[1], row[2], row[3] = d_bits & 0xFF, d_bits >> 8, dmin_bits & 0xFF, dmin_bits >> 8
        for j in range(4):
            row[4 + j] = six_bit_scales[j] | (six_bit_scales[j + 4] >> 4) << 6
            row[8 + j] = six_bit_mins[j] | (six_bit_mins[j + 4] >> 4) << 6
            row[12 + j] = (six_bit_scales[j + 4] & 15) | (six_bit_mins[j + 4] & 15) << 4
        d, dmin = _float16_value(d_bits), _float16_value(dmin_bits)
        for j in range(8):
            scale = d * np.float32(six_bit_scales[j])
            inverse = np.float32(1.0) / scale if scale != 0 else np.float32(0.0)
            _levels(block_values[32 * j:32 * j + 32], -(dmin * np.float32(six_bit_mins[j])), inverse, top,
                    levels[32 * j:32 * j + 32])
        if top == 15:  # Q4_K: two levels a byte, low nibble first
            for pair in range(4):
                for i in range(32):
                    low, high = np.uint8(levels[64 * pair + i]), np.uint8(levels[64 * pair + 32 + i])
                    row[16 + 32 * pair + i] = low | high << 4
        else:  # Q5_K: the low four bits so, and the fifth bit of sub-block p as bit p of bytes 16..47
            for i in range(32):
                row[16 + i] = 0
            for pair in range(4):
                for i in range(32):
                    low = np.uint8(levels[64 * pair + i])
                    high = np.uint8(levels[64 * pair + 32 + i])
                    row[48 + 32 * pair + i] = (low & 15) | (high & 15) << 4
                    row[16 + i] |= (low >> 4) << (2 * pair) | (high >> 4) << (2 * pair + 1)


@numba.njit(**_KERNEL)
def _q6_k_scale(x, steps, refits):
    """make_qx_quants(16, 32, ..., rmse_type=1) as blocks._q6_k_subblock_scales does it, for one sub-block."""
    high, low = x[0], x[0]
    for i in range(16):
        high = max(high, x[i])
        low = min(low, x[i])
    peak = high if high >= -low else low
    if np.abs(peak) < 1e-15:
        return np.float32(0.0)
    best_scale, best_gain = np.float32(0.0), np.float32(0.0)
    for attempt in range(steps.shape[0] + refits):
        if attempt < steps.shape[0]:
            sum_ll, sum_xl = _q6_k_sums(x, -(np.float32(32.0) + steps[attempt]) / peak, False)
        else:
            sum_ll, sum_xl = _q6_k_sums(x, best_scale if best_scale != 0 else np.float32(1.0), True)
        scale = sum_xl / sum_ll
        gain = scale * sum_xl
        if gain > best_gain:
            best_scale, best_gain = scale, gain
    return best_scale


@numba.njit(**_KERNEL)
def _q6_k_sums(x, factor, divide):
    """The levels round(x * factor), or round(x / factor) when `divide`, clamped to -32..31: their sums w*l*l and
    w*x*l with the weights x*x, multiplied and added in blocks._better_q6's order (so the same bytes)."""
    sum_ll, sum_xl = np.float32(0.0), np.float32(0.0)
    for i in range(16):
        level = min(max(_nearest(x[i] / factor if divide else x[i] * factor), np.float32(-32.0)), np.float32(31.0))
        squared = x[i] * x[i]
        sum_ll += squared * level * level
        sum_xl += level * (squared * x[i])
    return sum_ll, sum_xl


@numba.njit(**_KERNEL)
def _q6_k(values, bfloat16, out, steps, refits):
    """Q6_K super-blocks of `values` (see `_load`) into `out` (S, 210 bytes), packed as blocks.q6_k packs them."""
    block_values = np.empty(256, np.float32)
    scales = np.empty(16, np.float32)
    levels = np.empty(256, np.float32)
    for block in range(out.shape[0]):
        _load(values, block * 256, bfloat16, block_values)
        for j in range(16):
            scales[j] = _q6_k_scale(block_values[16 * j:16 * j + 16], steps, refits)
        high, low = scales.max(), scales.min()
        peak = high if high >= -low else low
        row = out[block]
        if np.abs(peak) < 1e-15:  # llama.cpp writes a block of zeros where every value is (nearly) 0
            row[:] = 0
            continue
        inverse = np.float32(-128.0) / peak
        d_bits = _float16_bits(np.float32(1.0) / inverse)
        d = _float16_value(d_bits)
        for j in range(16):
            scale_level = min(_nearest(inverse * scales[j]), np.float32(127.0))
            row[192 + j] = np.uint8(np.int64(scale_level) & 0xFF)
            subblock_d = d * scale_level
            level_inverse = np.float32(1.0) / subblock_d if subblock_d != 0 else np.float32(0.0)
            for i in range(16):
                level = _nearest(block_values[16 * j + i] * level_inverse)
                levels[16 * j + i] = min(max(level, np.float32(-32.0)), np.float32(31.0)) + np.float32(32.0)
        row[208], row[209] = d_bits & 0xFF, d_bits >> 8
        for half in range(2):
            for i in range(32):
                first = 128 * half + i
                one, two = np.uint8(levels[first]), np.uint8(levels[first + 32])
                three, four = np.uint8(levels[first + 64]), np.uint8(levels[first + 96])
                row[64 * half + i] = (one & 15) | (three & 15) << 4
                row[64 * half + 32 + i] = (two & 15) | (four & 15) << 4
                row[128 + 32 * half + i] = (one >> 4) | (two >> 4) << 2 | (three >> 4) << 4 | (four >> 4) << 6


def _values(values: torch.Tensor, out: torch.Tensor, block_bytes: int) -> tuple[np.ndarray, bool]:
    """The kernels' view of flat `values`: bfloat16 ones as their bits (widened in the kernels), others as float32.
    Raises ValueError when `out` is not one row of `block_bytes` per 256 values (the kernels do not check bounds)."""
    if values.numel() != out.shape[0] * 256 or tuple(out.shape) != (out.shape[0], block_bytes):
        raise ValueError(f"{values.numel()} values do not make the {tuple(out.shape)} bytes of blocks of "
                         f"{block_bytes}.")
    if values.dtype == torch.bfloat16:
        return values.contiguous().view(torch.int16).numpy().view(np.uint16), True
    return values.float().contiguous().numpy(), False


def q4_k(values: torch.Tensor, out: torch.Tensor, steps: torch.Tensor = blocks.Q4_K_STEPS,
         refits: int = blocks.Q4_K_REFITS, measure_plain: bool = False) -> None:
    """As blocks.q4_k: flat `values` (float32 or bfloat16, a multiple of 256) as Q4_K super-blocks into `out`
    ((S, 144) bytes)."""
    _min_scaled_blocks(*_values(values, out, 144), out.numpy(), np.float32(15.0), steps.numpy(), refits, measure_plain)


def q5_k(values: torch.Tensor, out: torch.Tensor, steps: torch.Tensor = blocks.Q5_K_STEPS,
         refits: int = blocks.Q5_K_REFITS, measure_plain: bool = False) -> None:
    """As blocks.q5_k: flat `values` (float32 or bfloat16, a multiple of 256) as Q5_K super-blocks into `out`
    ((S, 176) bytes)."""
    _min_scaled_blocks(*_values(values, out, 176), out.numpy(), np.float32(31.0), steps.numpy(), refits, measure_plain)


def q6_k(values: torch.Tensor, out: torch.Tensor, steps: torch.Tensor = blocks.Q6_K_STEPS,
         refits: int = blocks.Q6_K_REFITS) -> None:
    """As blocks.q6_k: flat `values` (float32 or bfloat16, a multiple of 256) as Q6_K super-blocks into `out`
    ((S, 210) bytes)."""
    _q6_k(*_values(values, out, 210), out.numpy(), steps.numpy(), refits)
