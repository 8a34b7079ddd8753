"""The GGUF quantizers alone: their cost per value and their error against llama.cpp's.

    python benchmarks/gguf_quantizers.py [--chunks 18,19,20]

For Q8_0 (torch) and Q4_K, Q5_K and Q6_K (the torch kernels of guiapp/gguf/blocks.py and the numba-compiled ones
of guiapp/gguf/compiled_blocks.py, which the export uses where numba is installed): the CPU nanoseconds per value
on one thread (chunks of 2^n values, as `in_chunks` cuts them; the fastest of three runs, in a process whose heaps
are set as the export command's), the wall nanoseconds per value on two threads as the export runs them (blocks of
16 MB of rows, each cut into chunks among the threads of a kept pool), and the RMSE of the dequantized weights
(gguf-py's dequantizer) over that of llama.cpp's reference quantizer (libgguf) on normal, heavy-tailed (Student-t,
3 and 2 degrees of freedom) and trained-like matrices (low rank, row scales, outlier columns). Q8_0 is llama.cpp's
byte for byte (ratio 1); the K-quants' shorter search aims within about 1.5 %.
CPU time rather than wall time for one thread: on a shared machine it moves less with the load (printed first),
though other programs still share the caches.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from guiapp.system.memory import configure_heaps  # noqa: E402 - before torch allocates, as the command does

configure_heaps()

import gguf  # noqa: E402
import libgguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from guiapp.gguf import blocks, compiled_blocks  # noqa: E402
from guiapp.gguf.export import BLOCK_BYTES  # noqa: E402

Q = gguf.GGMLQuantizationType
KERNELS = {("torch", Q.Q8_0): blocks.q8_0, ("torch", Q.Q4_K): blocks.q4_k, ("torch", Q.Q5_K): blocks.q5_k,
           ("torch", Q.Q6_K): blocks.q6_k, ("compiled", Q.Q4_K): compiled_blocks.q4_k,
           ("compiled", Q.Q5_K): compiled_blocks.q5_k, ("compiled", Q.Q6_K): compiled_blocks.q6_k}


def _student_t(df: int, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    normal = torch.randn(*shape, generator=generator)
    return normal / torch.randn(*shape, df, generator=generator).square().mean(dim=-1).sqrt()


def matrices() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    low_rank = torch.randn(512, 16, generator=generator) @ torch.randn(16, 2048, generator=generator) * 0.01
    trained = (low_rank + torch.randn(512, 2048, generator=generator) * 0.02) * \
        torch.rand(512, 1, generator=generator).add_(0.5)
    trained[:, torch.randint(0, 2048, (20,), generator=generator)] *= 10
    return {"normal": torch.randn(512, 2048, generator=generator) * 0.02,
            "student-t 3": _student_t(3, (512, 2048), generator) * 0.02,
            "student-t 2": _student_t(2, (256, 2048), generator) * 0.02, "trained-like": trained}


def _rmse(data: np.ndarray, rows: torch.Tensor, qtype: Q) -> float:
    decoded = gguf.quants.dequantize(data.reshape(rows.shape[0], -1), qtype)
    return float(np.sqrt(((decoded - rows.numpy()) ** 2).mean()))


def error_ratio(rows: torch.Tensor, kernel, qtype: Q) -> float:
    """RMSE of the kernel's blocks over that of llama.cpp's reference quantizer's."""
    ours = blocks.in_chunks(rows, kernel, *gguf.GGML_QUANT_SIZES[qtype], 1).numpy()
    theirs = libgguf.quantize_rows(rows.numpy(), libgguf.GGMLQuantizationType(int(qtype))).reshape(-1)
    return _rmse(ours, rows, qtype) / _rmse(theirs, rows, qtype)


def cpu_ns_per_value(values: torch.Tensor, kernel, qtype: Q, chunk: int) -> float:
    """The fastest of three runs of `kernel` over `values` in chunks of `chunk` values, on this thread."""
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    out = torch.empty(values.numel() // block_values, block_bytes, dtype=torch.uint8)
    fastest = float("inf")
    for _ in range(3):
        started = time.process_time()
        for start in range(0, values.numel(), chunk):
            kernel(values[start:start + chunk], out[start // block_values:(start + chunk) // block_values])
        fastest = min(fastest, time.process_time() - started)
    return fastest / values.numel() * 1e9


def two_thread_ns_per_value(values: torch.Tensor, kernel, qtype: Q, pool) -> float:
    """The fastest of three runs of `kernel` over `values` as the export runs it on two threads: wall time."""
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rows = BLOCK_BYTES // 4  # float32 values in one of the export's blocks of rows
    fastest = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for start in range(0, values.numel(), rows):
            blocks.in_chunks(values[start:start + rows], kernel, block_values, block_bytes, 2, pool)
        fastest = min(fastest, time.perf_counter() - started)
    return fastest / values.numel() * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="18,19,20", help="chunk sizes to time, as powers of two")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}\n")
    values = torch.randn(1 << 22, generator=torch.Generator().manual_seed(0)) * 0.02
    exponents = [int(part) for part in args.chunks.split(",")]
    print(f"{'kernels':<9}{'type':<6}" + "".join(f"{f'ns/value 2^{n}':>15}" for n in exponents) +
          f"{'2 threads':>11}")
    with blocks.quantizing_threads(2) as pool:
        for (kind, qtype), kernel in KERNELS.items():
            print(f"{kind:<9}{qtype.name:<6}" +
                  "".join(f"{cpu_ns_per_value(values, kernel, qtype, 1 << n):>15.2f}" for n in exponents) +
                  f"{two_thread_ns_per_value(values, kernel, qtype, pool):>11.2f}", flush=True)
    cases = matrices()
    print(f"\nRMSE over llama.cpp's\n{'kernels':<9}{'type':<6}" + "".join(f"{name:>14}" for name in cases))
    for (kind, qtype), kernel in KERNELS.items():
        print(f"{kind:<9}{qtype.name:<6}" + "".join(f"{error_ratio(rows, kernel, qtype):>14.4f}"
                                                   for rows in cases.values()), flush=True)


if __name__ == "__main__":
    main()
