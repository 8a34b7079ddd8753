"""The quantizers against llama.cpp's reference code (libgguf, native) and gguf-py: Q8_0 byte for byte; Q4_K, Q5_K
and Q6_K, both the torch kernels and the numba-compiled ones, with llama.cpp's full search nearly byte for byte, and
with the export's shorter search within 2 % of llama.cpp's error; every block read back by gguf-py's dequantizer;
the compiled blocks the torch kernels' but for sums added in another order."""

from __future__ import annotations

import sys
import threading
import time

import gguf
import libgguf
import numpy as np
import pytest
import torch

import guiapp.gguf
from guiapp.gguf import blocks, quantize
from guiapp.gguf.quantize import encode

try:
    from guiapp.gguf import compiled_blocks
except ImportError:  # no numba wheel for this machine: the torch kernels alone are tested
    compiled_blocks = None
needs_numba = pytest.mark.skipif(compiled_blocks is None, reason="numba is not installed here")

Q = gguf.GGMLQuantizationType
FULL_Q4_K = torch.arange(21, dtype=torch.float32) * 0.1 - 1.0  # make_qkx2_quants(rmin=-1, rdelta=0.1, nstep=20)
FULL_Q5_K = torch.arange(16, dtype=torch.float32) * 0.1 - 0.5  # rmin=-0.5, rdelta=0.1, nstep=15
FULL_Q6_K = torch.tensor([0.0, *range(-9, 0), *range(1, 10)]) * 0.1  # make_qx_quants' 0, then -9..9
KERNELS = {"torch": blocks, **({"compiled": compiled_blocks} if compiled_blocks else {})}  # q4_k, q5_k, q6_k
K_QUANTS = {Q.Q4_K: "q4_k", Q.Q5_K: "q5_k", Q.Q6_K: "q6_k"}


def _blocks(rows: torch.Tensor, qtype: Q, kernels: str, **search) -> np.ndarray:
    """`rows` as `qtype` super-blocks (S, bytes) made by the `kernels` implementation, with its default search or
    `search` (steps, refits...)."""
    out = torch.empty(rows.numel() // 256, gguf.GGML_QUANT_SIZES[qtype][1], dtype=torch.uint8)
    getattr(KERNELS[kernels], K_QUANTS[qtype])(rows.reshape(-1), out, **search)
    return out.numpy()


def _llama_cpp(rows: torch.Tensor, qtype: Q) -> np.ndarray:
    return libgguf.quantize_rows(rows.reshape(-1, 256).numpy(), libgguf.GGMLQuantizationType(int(qtype))).reshape(-1)


def _rmse(data: np.ndarray, rows: torch.Tensor, qtype: Q) -> float:
    decoded = gguf.quants.dequantize(data.reshape(rows.shape[0], -1), qtype)
    return float(np.sqrt(((decoded - rows.numpy()) ** 2).mean()))


def _student_t(df: int, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Student-t samples with `df` degrees of freedom drawn from `generator` (torch's StudentT takes none)."""
    normal = torch.randn(*shape, generator=generator)
    return normal / torch.randn(*shape, df, generator=generator).square().mean(dim=-1).sqrt()


def _matrices() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    normal = torch.randn(64, 1024, generator=generator) * 0.02
    heavy = _student_t(3, (64, 1024), generator) * 0.02
    # Trained-like: low-rank structure, per-row scales and a few outlier columns, as in a transformer's weights.
    low_rank = torch.randn(64, 8, generator=generator) @ torch.randn(8, 1024, generator=generator) * 0.01
    trained = (low_rank + normal) * torch.rand(64, 1, generator=generator).add_(0.5)
    trained[:, [3, 300, 777]] *= 12
    return {"normal": normal, "heavy-tailed": heavy, "trained-like": trained}


def _q8_0_cases() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    ties = torch.arange(256, dtype=torch.float32) % 100 - 50.5  # exact halves once the scale is 1
    ties.view(-1, 32)[:, 0] = 127.0
    just_below = torch.full((256,), 0.49999997)  # trunc(x + 0.5) would round this up
    just_below[::32] = 127.0
    return {"normal": torch.randn(4096, generator=generator),
            "heavy-tailed": _student_t(2, (4096,), generator),
            "zero": torch.zeros(256), "ties": ties, "negative ties": -ties, "just below a half": just_below,
            "subnormal": torch.randn(512, generator=generator) * 1e-41,
            "tiny": torch.randn(512, generator=generator) * 1e-30,
            "large": torch.randn(512, generator=generator) * 1e37}  # finite: infinities have no defined codes


@pytest.mark.parametrize("case", list(_q8_0_cases()))
def test_q8_0_blocks_are_llama_cpps_byte_for_byte(case):
    values = _q8_0_cases()[case]
    mine = encode(values.reshape(-1, 256), Q.Q8_0, 2)
    assert np.array_equal(mine, _llama_cpp(values, Q.Q8_0))


@pytest.mark.parametrize("case", ["normal", "heavy-tailed", "zero", "ties", "tiny"])
def test_q8_0_blocks_are_gguf_pys(case):
    values = _q8_0_cases()[case].reshape(-1, 256)
    assert np.array_equal(encode(values, Q.Q8_0), gguf.quants.quantize(values.numpy(), Q.Q8_0).reshape(-1))


@pytest.mark.parametrize("kernels", list(KERNELS))
@pytest.mark.parametrize(("qtype", "search"), [
    (Q.Q4_K, {"steps": FULL_Q4_K, "refits": 0, "measure_plain": True}),
    (Q.Q5_K, {"steps": FULL_Q5_K, "refits": 0, "measure_plain": True}), (Q.Q6_K, {"steps": FULL_Q6_K, "refits": 0})])
@pytest.mark.parametrize("name", list(_matrices()))
def test_with_llama_cpps_full_search_the_blocks_are_llama_cpps(kernels, qtype, search, name):
    """Only sums added in another order tell them apart: almost every super-block is the same, bytes and all, and
    the error is llama.cpp's. A wrong bit in the packing of scales or levels fails both."""
    rows = _matrices()[name]
    mine = _blocks(rows, qtype, kernels, **search)
    theirs = _llama_cpp(rows, qtype).reshape(mine.shape)
    assert (mine == theirs).all(axis=1).mean() > 0.9
    assert _rmse(mine.reshape(-1), rows, qtype) == pytest.approx(_rmse(theirs.reshape(-1), rows, qtype), rel=2e-3)


@pytest.mark.parametrize("kernels", list(KERNELS))
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K])
@pytest.mark.parametrize("name", list(_matrices()))
def test_the_exports_search_errs_within_two_percent_of_llama_cpps(kernels, qtype, name):
    rows = _matrices()[name]
    ratio = _rmse(_blocks(rows, qtype, kernels), rows, qtype) / _rmse(_llama_cpp(rows, qtype), rows, qtype)
    assert ratio < 1.02


@needs_numba
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K])
@pytest.mark.parametrize("name", list(_matrices()))
def test_the_compiled_blocks_are_the_torch_kernels(qtype, name):
    """The same search and packing: Q6_K's sums are added in the same order, so its blocks are the same bytes;
    Q4_K's and Q5_K's are added in another (vectorised), so a level or scale differs now and then where a sum falls
    on the other side of a rounding, and the error is the same to a thousandth."""
    rows = _matrices()[name]
    compiled, torch_made = _blocks(rows, qtype, "compiled"), _blocks(rows, qtype, "torch")
    if qtype == Q.Q6_K:
        assert np.array_equal(compiled, torch_made)
    else:
        assert (compiled == torch_made).all(axis=1).mean() > 0.97
        assert _rmse(compiled, rows, qtype) == pytest.approx(_rmse(torch_made, rows, qtype), rel=1e-3)


@needs_numba
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K])
def test_the_compiled_kernels_read_bfloat16_as_its_float32(qtype):
    """The export hands them a bfloat16 model's rows as they are (no pass turning them into float32 first): the
    same blocks as from the rows widened to float32, the encoder saying so."""
    rows = _matrices()["trained-like"].to(torch.bfloat16)
    assert quantize.reads_bfloat16(qtype)
    assert np.array_equal(_blocks(rows, qtype, "compiled"), _blocks(rows.float(), qtype, "compiled"))
    assert np.array_equal(encode(rows, qtype, 2), encode(rows.float(), qtype, 2))


@pytest.mark.parametrize("kernels", list(KERNELS))
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K])
@pytest.mark.parametrize("scale", [1e-20, 1e-40])
def test_super_blocks_too_small_for_their_sums_decode(kernels, qtype, scale):
    """Values so small (decayed or untrained rows; subnormal ones) that their squares and sums underflow: a fit
    divides by zero, which makes scale 0, as in torch, not an exception. The blocks are the torch kernels'."""
    rows = torch.randn(2, 256, generator=torch.Generator().manual_seed(4)) * scale
    made = _blocks(rows, qtype, kernels)
    assert np.array_equal(made, _blocks(rows, qtype, "torch"))
    decoded = gguf.quants.dequantize(made.reshape(2, -1), qtype)
    assert np.allclose(decoded, rows.numpy(), rtol=0, atol=10 * scale)


@pytest.mark.parametrize("kernels", list(KERNELS))
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K])
def test_zero_constant_and_outlier_super_blocks_decode(kernels, qtype):
    rows = torch.zeros(4, 256)
    rows[1] = 0.25  # constant, positive
    rows[2] = -3.0  # constant, negative
    rows[3, 17] = 1e4  # one outlier among zeros
    decoded = gguf.quants.dequantize(_blocks(rows, qtype, kernels).reshape(4, -1), qtype)
    assert np.array_equal(decoded[0], np.zeros(256))
    assert np.allclose(decoded[1:], rows[1:].numpy(), rtol=0.02, atol=1e-3)


@needs_numba
def test_the_export_uses_the_compiled_kernels_and_torchs_where_numba_is_missing(monkeypatch):
    """numba installs on this machine, so the export's K-quants are compiled; on one where it does not (no wheel
    for Intel Macs), the torch kernels make them."""
    assert quantize.block_kernel(Q.Q4_K).make is compiled_blocks.q4_k
    monkeypatch.setitem(sys.modules, "numba", None)  # importing it fails, as where it is not installed
    monkeypatch.delitem(sys.modules, "guiapp.gguf.compiled_blocks")
    monkeypatch.delattr(guiapp.gguf, "compiled_blocks")
    quantize.compiled_kernels.cache_clear()
    try:
        kernels = [quantize.block_kernel(qtype) for qtype in K_QUANTS]
    finally:
        quantize.compiled_kernels.cache_clear()
    assert [kernel.make for kernel in kernels] == [blocks.q4_k, blocks.q5_k, blocks.q6_k]
    assert not any(kernel.reads_bfloat16 for kernel in kernels)


@pytest.mark.parametrize("qtype", [Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0])
def test_other_types_do_not_load_the_compiled_kernels(monkeypatch, qtype):
    """numba is loaded (a fifth of a second and more) for K-quants alone: an f16 or q8_0 export never waits for it."""

    def refused():
        raise AssertionError("the compiled kernels were asked for")

    monkeypatch.setattr(quantize, "compiled_kernels", refused)
    assert encode(torch.randn(2, 256).to(torch.bfloat16), qtype).size > 0


@needs_numba
def test_the_compiled_kernels_let_other_threads_run():
    """They release Python's lock while they work, so the export's quantizing threads run at once: this thread sees
    another's blocks being written while its kernel runs (with the lock held it could look only before and after)."""
    values = torch.randn(1 << 21)
    out = torch.zeros(values.numel() // 256, 144, dtype=torch.uint8)
    compiled_blocks.q4_k(values[:256], out[:1])  # compiled (or loaded) before the test
    out.zero_()
    worker = threading.Thread(target=compiled_blocks.q4_k, args=(values, out, FULL_Q4_K, 0))
    partly_written = 0
    worker.start()
    while worker.is_alive():
        written = int(out[:, :2].any(dim=1).sum())  # every block's d, nonzero for random values
        partly_written += 0 < written < out.shape[0]
    worker.join()
    assert int(out[:, :2].any(dim=1).sum()) == out.shape[0]
    assert partly_written > 0


def test_q8_0s_rounding_is_roundf_on_every_kind_of_float():
    """Random float32 bit patterns up to 128.5 (the range Q8_0 rounds), every half and the floats beside each:
    rounded as C's roundf (halves away from zero), computed exactly in float64."""
    top = int(np.float32(128.5).view(np.int32))
    patterns = torch.randint(0, top + 1, (1 << 22,), generator=torch.Generator().manual_seed(5), dtype=torch.int32)
    halves = torch.arange(0.5, 128.0, 1.0)
    below, above = torch.nextafter(halves, torch.zeros(1)), torch.nextafter(halves, torch.full((1,), 200.0))
    beside = torch.cat([below, halves, above])
    values = torch.cat([patterns.view(torch.float32), beside])
    expected = torch.floor(values.double() + 0.5).float()
    assert torch.equal(blocks._round_magnitude(values.clone()), expected)


@pytest.mark.parametrize("qtype", [gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_K,
                                   gguf.GGMLQuantizationType.Q5_K, gguf.GGMLQuantizationType.Q6_K])
def test_rows_that_are_not_whole_blocks_are_refused(qtype):
    """A block never spans two rows: rows of 100 values cannot be Q8_0 (blocks of 32) or a K-quant (256), and
    llama.cpp's quantizer refuses them too; the export chooses a type whose blocks fit (tensor_type)."""
    with pytest.raises(ValueError, match="100 values"):
        encode(torch.randn(3, 100), qtype)


def test_a_small_tensor_is_split_among_the_threads():
    """A tensor of fewer values than a chunk still keeps every thread busy: it is cut into one chunk per thread."""
    chunks = []

    def kernel(values: torch.Tensor, out: torch.Tensor) -> None:
        chunks.append(values.numel())
        out.zero_()

    blocks.in_chunks(torch.zeros(1024 * 256), kernel, 256, 144, 2)
    assert sorted(chunks) == [512 * 256, 512 * 256]


def test_a_kept_pool_lends_only_the_threads_asked_for():
    """The export keeps one pool for the whole file, as large as the machine's cores, and asks for each block of
    rows only the threads free at that moment: no more of the pool's threads work on it."""
    workers = set()

    def kernel(values: torch.Tensor, out: torch.Tensor) -> None:
        workers.add(threading.get_ident())
        time.sleep(0.01)  # the pool's other threads would take the next chunks meanwhile
        out.zero_()

    with blocks.quantizing_threads(3) as pool:
        data = blocks.in_chunks(torch.zeros(4 * blocks._CHUNK), kernel, 32, 34, 1, pool)
        assert len(workers) == 1
        blocks.in_chunks(torch.zeros(4 * blocks._CHUNK), kernel, 32, 34, 3, pool)
    assert len(workers) == 3
    assert data.numel() == 4 * blocks._CHUNK // 32 * 34
