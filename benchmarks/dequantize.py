"""Where the time of dequantizing a merge's block goes, stage by stage, in ns a value on one core.

    python benchmarks/dequantize.py [--repeat 30]

One block of a merge (BLOCK_ELEMENTS values of a 2048-wide weight) as bitsandbytes 4-bit (nf4, double quantized,
quantized by bitsandbytes) and as FP8 (e4m3, 128x128 block scales): each step of Mergesmith's dequantizers timed
alone on one torch thread (the fastest of --repeat), their whole (as the row readers call them), the whole row
read of such a block from a file (reading, checks and dequantizing), and beside them what bounds them: a bf16 row
read of the same block (what the bf16 merge reads instead), torch's own float8 conversion, a plain gather of as
many table rows (torch's index_select, the cheapest gather torch has on the CPU), bitsandbytes' native CPU kernel
(bitsandbytes, of the test extra, quantizes the 4-bit block), and the memory copy rate. The merge benchmark's quantized table
(benchmarks/merge.py --quantized) gives the end-to-end ratios these explain.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from workload import load_average, memory_copy_rate

ROWS, COLUMNS = 512, 2048  # one merge block (1 << 20 values) of a 2048-wide weight


def fastest_ns(work: Callable[[], object], values: int, repeat: int) -> float:
    """The fastest of `repeat` runs of `work`, in ns per value."""
    work()
    fastest = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        fastest = min(fastest, time.perf_counter() - start)
    return fastest / values * 1e9


def four_bit_stages(weight: torch.Tensor, repeat: int) -> dict[str, float]:
    import bitsandbytes.functional as F

    from guiapp.checkpoints.quantized.bitsandbytes import dequantize_4bit, dequantize_blockwise, value_pairs
    from guiapp.checkpoints.quantized.layout import look_up

    packed, state = F.quantize_4bit(weight, quant_type="nf4", compress_statistics=True, blocksize=64)
    parts = state.as_dict(packed=True)
    codes, pairs, count = packed.reshape(-1), value_pairs(parts["quant_map"]), weight.numel()
    nested = state.state2

    def absmax() -> torch.Tensor:
        return dequantize_blockwise(parts["absmax"], nested.code.float(), parts["nested_absmax"], nested.blocksize) \
            + state.offset

    scales = absmax()
    values = look_up(pairs, codes)
    stages = {
        "absmax decoded (double quantization)": fastest_ns(absmax, count, repeat),
        "codes widened to int32 (look_up's index)": fastest_ns(lambda: codes.to(torch.int32), count, repeat),
        "code pairs looked up (float32)": fastest_ns(lambda: look_up(pairs, codes), count, repeat),
        "scaled by absmax in place": fastest_ns(lambda: values.view(-1, 64).mul_(scales.reshape(-1, 1)), count,
                                                repeat),
        "float32 -> bfloat16": fastest_ns(lambda: values.to(torch.bfloat16), count, repeat),
        "whole: dequantize_4bit + bfloat16": fastest_ns(
            lambda: dequantize_4bit(codes, absmax(), pairs, count, 64).to(torch.bfloat16), count, repeat),
    }
    stages["bitsandbytes' native CPU kernel (bf16 out)"] = fastest_ns(lambda: F.dequantize_4bit(packed, state),
                                                                     count, repeat)
    return stages


def fp8_stages(weight: torch.Tensor, repeat: int) -> dict[str, float]:
    from guiapp.checkpoints.quantized.fp8 import dequantized

    tiles = weight.float().view(ROWS // 128, 128, COLUMNS // 128, 128)
    scale = tiles.abs().amax(dim=(1, 3)) / torch.finfo(torch.float8_e4m3fn).max
    codes = (tiles / scale[:, None, :, None]).view(ROWS, COLUMNS).to(torch.float8_e4m3fn)
    per_row = scale[torch.arange(ROWS) // 128]  # as the row reader hands the scales of a block's rows
    bits = codes.view(torch.int8).to(torch.int16)
    floats = bits.view(torch.bfloat16).float()
    count = codes.numel()
    return {
        "NaN check (one OR, one max)": fastest_ns(lambda: int((codes.view(torch.uint8) | 0x80).max()), count, repeat),
        "int8 -> int16": fastest_ns(lambda: codes.view(torch.int8).to(torch.int16), count, repeat),
        "bits moved (shift, mask)": fastest_ns(lambda: bits.__ilshift__(0).__iand__(-1), count, repeat),
        "bfloat16 bits -> float32": fastest_ns(lambda: bits.view(torch.bfloat16).float(), count, repeat),
        "scaled per 128-column block in place": fastest_ns(
            lambda: floats.view(ROWS, COLUMNS // 128, 128).mul_(per_row.unsqueeze(-1)), count, repeat),
        "float32 -> bfloat16": fastest_ns(lambda: floats.to(torch.bfloat16), count, repeat),
        "whole: dequantized (bf16 out)": fastest_ns(lambda: dequantized(codes, per_row, torch.bfloat16, (1, 128)),
                                                    count, repeat),
        "torch's own float8 -> bfloat16": fastest_ns(lambda: codes.to(torch.bfloat16), count, repeat),
    }


def row_reads(weight: torch.Tensor, repeat: int) -> dict[str, tuple[float, float]]:
    """A block of rows read from a file as a merge reads it (positional reads, checks, dequantizing), and the
    fixed cost of one read (a single row)."""
    from merge import QUANTIZERS
    from safetensors.torch import save_file

    from guiapp.checkpoints.reading import open_checkpoint

    name, figures = "model.layers.0.mlp.up_proj.weight", {}
    with tempfile.TemporaryDirectory(prefix="mergesmith-dequantize-") as folder:
        for kind, (quantize, settings) in (("bf16", (lambda n, w: {n: w}, None)), *QUANTIZERS.items()):
            model = Path(folder) / kind
            model.mkdir()
            save_file({n: t.contiguous() for n, t in quantize(name, weight).items()}, model / "model.safetensors",
                      metadata={"format": "pt"})
            config = {"model_type": "llama", "torch_dtype": "bfloat16"}
            (model / "config.json").write_text(json.dumps(
                {**config, **({"quantization_config": settings} if settings else {})}))
            with open_checkpoint(model) as checkpoint:
                block = fastest_ns(lambda: checkpoint.read_rows(name, range(ROWS)), weight.numel(), repeat)
                one_row = fastest_ns(lambda: checkpoint.read_rows(name, range(1)), 1, repeat * 10) / 1e3
            figures[kind] = (block, one_row)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=30, help="runs of each step; the fastest counts")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the merge's reading thread
    weight = torch.randn(ROWS, COLUMNS, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    print(f"Dequantizing one merge block ({ROWS}x{COLUMNS}) on one torch thread, ns a value ({load_average()})")
    for title, stages in (("bitsandbytes 4-bit (nf4, double quantized)", four_bit_stages(weight, args.repeat)),
                          ("FP8 (e4m3, 128x128 block scales)", fp8_stages(weight, args.repeat))):
        print(f"\n{title}")
        for stage, ns in stages.items():
            print(f"  {stage:<46} {ns:6.3f}")
    gathered = torch.randint(0, 256, (ROWS * COLUMNS // 2,), dtype=torch.int32)
    table = torch.zeros(256, dtype=torch.int64)
    gather = fastest_ns(lambda: table.index_select(0, gathered), gathered.numel(), args.repeat)
    print(f"\n  a plain gather of 8-byte table rows (index_select): {gather:.3f} ns a row, at any table or output size:"
          " torch's floor for a table look-up (the 4-bit code pairs are one row a byte, two values)")
    print("\nA block's row read from a file (reading, checks, dequantizing), ns a value; and one row's read, µs:")
    for kind, (block, one_row) in row_reads(weight, args.repeat).items():
        print(f"  {kind:<5} {block:6.3f} ns a value   one row {one_row:6.1f} µs")
    print(f"\n(memory copies at {memory_copy_rate():.1f} GB/s on one thread; {load_average()})")


if __name__ == "__main__":
    main()
