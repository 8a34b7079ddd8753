"""The types a GGUF file can be written in, which tensor gets which type, and the quantizers.

File types and their mixes follow llama.cpp's `llama_tensor_get_type`: in Q4_K_M and Q5_K_M the output layer,
and the value projections and down projections of about a third of the layers (the first and last eighth and
every third between), get Q6_K; a tensor whose rows are not a multiple of the type's block falls back to a type
whose block fits (Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, else F16), as llama.cpp does. One-dimensional
tensors (norms, biases) stay float32.

Q8_0 blocks are made by torch in guiapp/gguf/blocks.py, byte for byte as llama.cpp's reference code; Q4_K, Q5_K
and Q6_K blocks (all of q4_k_m, q5_k_m and q6_k files but fallbacks) with llama.cpp's search cut to a few steps (an
error within about 1 % of llama.cpp's, several times faster) by the numba kernels of guiapp/gguf/compiled_blocks.py,
or where numba does not install by the torch kernels of blocks.py, which make the same blocks at about half the
speed on one thread and less than that on several. Q4_0 and the fallbacks Q5_0 and Q5_1 are made by llama.cpp's
reference code in `libgguf` (native, releases the GIL, so blocks of rows are quantized on several threads); torch
rounds float32 to f16 and bf16. Sources are turned into float32 by torch (bf16 rows of a compiled K-quant are
widened in its kernel instead), so a bf16 source never becomes a NumPy array of a type NumPy does not have.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec

import gguf
import libgguf
import numpy as np
import torch

from guiapp.facts.gguf_types import KIND_WORDS
from guiapp.gguf import blocks

Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class FileKind:
    """One choice of `--type`: llama.cpp's file type number, the type most tensors get, and plain words."""

    name: str
    file_type: gguf.LlamaFileType
    default: gguf.GGMLQuantizationType
    words: str


_TYPES = {"f32": (gguf.LlamaFileType.ALL_F32, Q.F32), "f16": (gguf.LlamaFileType.MOSTLY_F16, Q.F16),
          "bf16": (gguf.LlamaFileType.MOSTLY_BF16, Q.BF16), "q8_0": (gguf.LlamaFileType.MOSTLY_Q8_0, Q.Q8_0),
          "q6_k": (gguf.LlamaFileType.MOSTLY_Q6_K, Q.Q6_K), "q5_k_m": (gguf.LlamaFileType.MOSTLY_Q5_K_M, Q.Q5_K),
          "q4_k_m": (gguf.LlamaFileType.MOSTLY_Q4_K_M, Q.Q4_K), "q4_0": (gguf.LlamaFileType.MOSTLY_Q4_0, Q.Q4_0)}
FILE_KINDS: dict[str, FileKind] = {name: FileKind(name, *_TYPES[name], words) for name, words in KIND_WORDS.items()}

# llama.cpp's fallbacks for rows that are not a multiple of a K-quant's 256 values.
_FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}
_K_MIXES = (gguf.LlamaFileType.MOSTLY_Q4_K_M, gguf.LlamaFileType.MOSTLY_Q5_K_M)


def quantizable(name: str, shape: tuple[int, ...]) -> bool:
    """Whether llama.cpp would quantize the tensor: matrices named *.weight, never norms."""
    return len(shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name


def _more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third layer between."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def tensor_type(kind: FileKind, name: str, shape: tuple[int, ...], layers: int, tied: bool) -> gguf.GGMLQuantizationType:
    """The type tensor `name` (shape in Hugging Face's order, rows last-but-one) is written in, for a model of
    `layers` layers whose output layer is the token embedding when `tied`."""
    if not quantizable(name, shape):
        return Q.F32
    chosen = kind.default
    if chosen in (Q.F32, Q.F16, Q.BF16):
        return chosen
    columns = shape[-1]
    output = name == "output.weight" or (tied and name == "token_embd.weight")
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if output:
        chosen = Q.Q8_0 if columns % gguf.GGML_QUANT_SIZES[chosen][0] else (chosen if chosen == Q.Q8_0 else Q.Q6_K)
    elif kind.file_type in _K_MIXES and (".attn_v." in name or ".attn_qkv." in name or ".ffn_down" in name):
        # llama.cpp counts a fused qkv as a value projection (its own qkv rule is never reached).
        chosen = Q.Q6_K if _more_bits(layer, layers) else chosen
    if columns % gguf.GGML_QUANT_SIZES[chosen][0]:
        chosen = _FALLBACK.get(chosen, Q.F16)
        if columns % gguf.GGML_QUANT_SIZES[chosen][0]:
            chosen = Q.F16
    return chosen


def stored_bytes(shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType) -> int:
    """Bytes of a tensor of `shape` stored as `qtype`."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    elements = 1
    for dimension in shape:
        elements *= dimension
    return elements // block * size


def encode(rows: torch.Tensor, qtype: gguf.GGMLQuantizationType, threads: int = 1,
           pool: ThreadPoolExecutor | None = None) -> np.ndarray:
    """`rows` (float32, or another float type widened to it, on the CPU) stored as `qtype`: the bytes of the file,
    as a flat uint8 array.

    Quantized types are made on up to `threads` threads, those of `pool` when given (blocks.quantizing_threads: a
    caller encoding many pieces keeps one). Raises ValueError when a row is not a whole number of the type's blocks
    (`tensor_type` chooses a type whose blocks fit).
    """
    if rows.dtype != torch.float32 and not (rows.dtype == torch.bfloat16 and reads_bfloat16(qtype)):
        rows = rows.float()
    if qtype == Q.F32:
        return rows.contiguous().numpy().reshape(-1).view(np.uint8)
    if qtype in (Q.F16, Q.BF16):
        dtype = torch.float16 if qtype == Q.F16 else torch.bfloat16
        return rows.to(dtype).contiguous().view(torch.int16).numpy().reshape(-1).view(np.uint8)
    kernel = block_kernel(qtype)
    if kernel is not None:
        return blocks.in_chunks(rows.contiguous(), kernel.make, *gguf.GGML_QUANT_SIZES[qtype], threads, pool).numpy()
    matrix = rows.reshape(-1, rows.shape[-1]).contiguous().numpy()
    native = libgguf.GGMLQuantizationType(int(qtype))
    parts = np.array_split(matrix, min(threads, matrix.shape[0])) if threads > 1 else [matrix]
    if len(parts) == 1:
        return libgguf.quantize_rows(matrix, native).reshape(-1)
    with nullcontext(pool) if pool is not None else ThreadPoolExecutor(len(parts)) as threads_used:
        done = list(threads_used.map(lambda part: libgguf.quantize_rows(part, native), parts))
    return np.concatenate([part.reshape(-1) for part in done])


@dataclass(frozen=True)
class BlockKernel:
    """What makes one type's blocks: `make` (blocks.in_chunks' kernel, from flat values), and whether it takes
    bfloat16 values as they are (the compiled K-quants widen them as they go) rather than float32."""

    make: Callable[[torch.Tensor, torch.Tensor], None]
    reads_bfloat16: bool = False


_TORCH_MADE = {Q.Q8_0: BlockKernel(blocks.q8_0), Q.Q4_K: BlockKernel(blocks.q4_k), Q.Q5_K: BlockKernel(blocks.q5_k),
               Q.Q6_K: BlockKernel(blocks.q6_k)}
K_QUANTS = (Q.Q4_K, Q.Q5_K, Q.Q6_K)


@cache
def compiled_kernels() -> dict[gguf.GGMLQuantizationType, BlockKernel]:
    """The K-quants' kernels compiled by numba, or none where it is not installed (no wheel for Intel Macs) or has
    no folder to keep them in. Imported on the first K-quant export, not when the app starts nor for other types (a
    fifth of a second)."""
    try:
        from guiapp.gguf import compiled_blocks  # noqa: PLC0415 - see the docstring
    except (ImportError, RuntimeError):  # RuntimeError: no folder numba can keep its cache in (read-only installs)
        return {}
    return {Q.Q4_K: BlockKernel(compiled_blocks.q4_k, True), Q.Q5_K: BlockKernel(compiled_blocks.q5_k, True),
            Q.Q6_K: BlockKernel(compiled_blocks.q6_k, True)}


def block_kernel(qtype: gguf.GGMLQuantizationType) -> BlockKernel | None:
    """What makes `qtype`'s blocks in this package: a compiled K-quant where numba is installed, else torch's; None
    for a type made otherwise (floats, and libgguf's Q4_0, Q5_0 and Q5_1)."""
    compiled = compiled_kernels().get(qtype) if qtype in K_QUANTS else None
    return compiled or _TORCH_MADE.get(qtype)


def k_quant_maker(qtypes: list[gguf.GGMLQuantizationType]) -> str | None:
    """What makes the K-quant blocks among `qtypes` on this machine, as an export's summary says it: "compiled"
    (numba's kernels) or "torch" (where numba is not installed: about half as fast); None when there are none."""
    if not any(qtype in K_QUANTS for qtype in qtypes):
        return None
    return "compiled" if compiled_kernels() else "torch"


def reads_bfloat16(qtype: gguf.GGMLQuantizationType) -> bool:
    """Whether `encode` takes bfloat16 rows of `qtype` as they are (the compiled K-quants widen them as they go)."""
    kernel = block_kernel(qtype)
    return kernel is not None and kernel.reads_bfloat16


def seconds_per_value(qtype: gguf.GGMLQuantizationType) -> float:
    """Seconds the kernels take to quantize one value as `qtype` on one thread (0 for float types), for the time
    estimate: measured by benchmarks/gguf_quantizers.py on a 2-core workstation; a rough guide, not a promise.
    Asks only whether numba is installed, taking an installed numba to load (a dry run does not import it)."""
    return (_COMPILED_SECONDS if find_spec("numba") is not None else _SECONDS).get(qtype, 0.0)


_SECONDS = {Q.Q4_K: 1.2e-8, Q.Q5_K: 1.4e-8, Q.Q6_K: 8e-9, Q.Q5_0: 2e-8, Q.Q5_1: 2e-8, Q.Q8_0: 2e-9, Q.Q4_0: 4e-9}
_COMPILED_SECONDS = {**_SECONDS, Q.Q4_K: 6.5e-9, Q.Q5_K: 6.5e-9, Q.Q6_K: 6e-9}
