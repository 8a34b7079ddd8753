"""LoRA extraction benchmark: the randomized solver against the exact one on Llama-shaped deltas.

For each matrix (attention 2048², MLP 2048×5632, attention 4096²) and spectrum (a planted rank-32 update plus
noise, and a heavy-tailed power-law spectrum like real fine-tune deltas) it prints, for ranks 16, 64 and 256:
the wall and CPU time of the randomized solver and of the exact full SVD, both Frobenius errors relative to ‖Δ‖, the
randomized error's ratio to the optimum, and the speedup. Then it measures the peak memory of one randomized
decomposition in a fresh process, and (unless --no-end-to-end) runs `extract_lora` on a generated Llama-shaped
pair with both solvers.

Run: .venv/bin/python benchmarks/extract.py [--quick]

    .venv/bin/python benchmarks/extract.py --busy [--size-gb 1.0]

runs the whole `mergesmith extract-lora --rank 64` command and `mergekit-extract-lora` (from recipe_parity.py's venv)
on the same generated Llama-shaped bf16 pair, each on a quiet machine and while one busy process per half of the
cores competes for the CPU, in one run: ours over theirs (goal ≥ 10× faster) and busy over quiet (goal ≤ 1.5×).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guiapp.lora.lowrank import RankRule, decompose, relative_error  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import CompetingLoad, load_average, mergekit_tool  # noqa: E402

SHAPES = {"attn 2048²": (2048, 2048), "mlp 2048×5632": (5632, 2048), "attn 4096²": (4096, 4096)}
RANKS = (16, 64, 256)


def planted(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """A rank-32 update (scale of a fine-tune delta) plus full-rank noise at 5 % of its norm."""
    update = torch.randn(rows, 32, generator=generator) @ torch.randn(32, cols, generator=generator)
    update *= 1e-3 / 32**0.5
    noise = torch.randn(rows, cols, generator=generator)
    return update + noise * (0.05 * float(update.norm()) / float(noise.norm()))


def heavy_tailed(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """Singular values s_i ∝ i^-0.5 over the full rank, with random singular vectors."""
    k = min(rows, cols)
    left = torch.linalg.qr(torch.randn(rows, k, generator=generator)).Q
    right = torch.linalg.qr(torch.randn(cols, k, generator=generator)).Q
    spectrum = torch.arange(1, k + 1, dtype=torch.float32) ** -0.5 * 1e-3
    return (left * spectrum) @ right.T


def timed(action, repeats: int = 1) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result) of the fastest of `repeats` runs.

    CPU time is reported next to wall time because on a shared machine other processes stretch wall time;
    the speedup is computed from CPU time, which measures the work each solver does.
    """
    best = None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = action()
        sample = (time.perf_counter() - wall, time.process_time() - cpu, result)
        best = sample if best is None or sample[1] < best[1] else best
    return best


def solver_table(shapes: dict[str, tuple[int, int]]) -> list[dict]:
    rows_out = []
    for label, (rows, cols) in shapes.items():
        for kind, make in (("planted", planted), ("heavy-tailed", heavy_tailed)):
            delta = make(rows, cols, torch.Generator().manual_seed(0))
            exact_wall, exact_cpu, svd = timed(lambda: torch.linalg.svd(delta, full_matrices=False))  # noqa: B023 - called at once
            energy = svd.S.double().square()
            for rank in RANKS:
                optimum = float((energy[rank:].sum() / energy.sum()).sqrt())
                wall, cpu, parts = timed(lambda: decompose(delta, RankRule("fixed", rank), "randomized"),  # noqa: B023
                                         repeats=3)  # timed() calls it before the loop moves on
                error = relative_error(delta, parts.left, parts.right)
                row = {
                    "matrix": label, "spectrum": kind, "rank": rank, "randomized_wall_s": wall, "randomized_cpu_s": cpu,
                    "exact_wall_s": exact_wall, "exact_cpu_s": exact_cpu, "randomized_error": error,
                    "exact_error": optimum, "ratio": error / optimum, "speedup": exact_cpu / cpu,
                }
                rows_out.append(row)
                print(
                    f"{label:<14} {kind:<12} r={rank:<4} randomized {wall:6.2f}s ({cpu:6.2f} CPU-s)  "
                    f"exact {exact_wall:6.1f}s ({exact_cpu:6.1f} CPU-s)  error {error:.5f} vs optimum {optimum:.5f}  "
                    f"ratio {error / optimum:.4f}  speedup {exact_cpu / cpu:6.1f}×",
                    flush=True,
                )
    return rows_out


def anonymous_memory() -> int:
    """Bytes of anonymous (allocated) memory of this process, from /proc (Linux).

    Resident memory would also count the pages of memory-mapped model files that were read, which the kernel
    can drop at any time: that is page cache, not memory the job needs.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


class PeakMemory:
    """Samples this process's anonymous memory every millisecond in a thread; `.peak_mb` above the start."""

    def __enter__(self) -> PeakMemory:
        gc.collect()
        self.start = anonymous_memory()
        self.peak = self.start
        self._running = True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._running = False
        self._thread.join()

    def _sample(self) -> None:
        while self._running:
            self.peak = max(self.peak, anonymous_memory())
            time.sleep(0.001)

    @property
    def peak_mb(self) -> float:
        return (self.peak - self.start) / 1e6


def memory_probe(rows: int, cols: int, rank: int) -> None:
    """Child process: the memory one randomized decomposition needs beyond the matrix itself."""
    delta = planted(rows, cols, torch.Generator().manual_seed(0))
    with PeakMemory() as memory:
        decompose(delta, RankRule("fixed", rank), "randomized")
    print(json.dumps({"matrix_mb": delta.numel() * 4 / 1e6, "extra_peak_mb": memory.peak_mb}))


def extraction_probe(base: str, tuned: str, out: str, solver: str) -> None:
    """Child process: one extract_lora run, its wall time and the memory it needs beyond the loaded libraries."""
    from guiapp.lora.extract import ExtractionSettings, extract_lora  # noqa: PLC0415

    with PeakMemory() as memory:
        settings = ExtractionSettings(base, tuned, Path(out), rule=RankRule("fixed", 64), solver=solver)
        seconds, cpu_seconds, summary = timed(lambda: extract_lora(settings))
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_mb": memory.peak_mb,
                      "energy": summary["mean_retained_energy"],
                      "adapter_mb": summary["adapter_bytes"] / 1e6}))


def child(*args: str) -> dict:
    output = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def measure_memory(rows: int, cols: int, rank: int) -> dict:
    result = child("--memory-probe", str(rows), str(cols), str(rank))
    print(f"peak memory, randomized rank {rank} on {rows}×{cols}: matrix {result['matrix_mb']:.0f} MB, "
          f"extra peak {result['extra_peak_mb']:.0f} MB", flush=True)
    return result


def end_to_end(hidden: int, intermediate: int, layers: int) -> None:
    """extract_lora on a generated Llama-shaped pair, each solver in a fresh process: wall time and peak memory."""
    from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        shape = LlamaShape(hidden=hidden, intermediate=intermediate, layers=layers, heads=16, kv_heads=4, vocab=4096)
        base = write_llama(folder / "base", shape, dtype=torch.bfloat16)
        tuned = write_llama_finetune(folder / "tuned", base, delta_rank=32, noise=1e-4)
        model_mb = sum(p.stat().st_size for p in base.glob("*.safetensors")) / 1e6
        largest_mb = hidden * intermediate * 4 / 1e6
        for solver in ("randomized", "exact"):
            result = child("--extraction-probe", str(base), str(tuned), str(folder / f"lora-{solver}"), solver)
            print(f"extract_lora {solver:<10} hidden {hidden}, {layers} layers ({model_mb:.0f} MB bf16 model, largest "
                  f"float32 matrix {largest_mb:.0f} MB): {result['seconds']:6.1f}s ({result['cpu_seconds']:.1f} CPU-s), "
                  f"mean retained energy "
                  f"{result['energy']:.4f}, adapter {result['adapter_mb']:.1f} MB, peak memory {result['peak_mb']:.0f} MB",
                  flush=True)


def busy_comparison(size_gb: float, rank: int, timeout: float, models: Path | None = None) -> None:
    """Our extract-lora command and mergekit's, quiet and busy, on one generated pair (or `models`/base and
    `models`/one from an earlier merge benchmark); prints a table."""
    from merge import build_models, timed_run  # noqa: PLC0415 - the 1 GB models of the merge benchmark

    mergekit = mergekit_tool("mergekit-extract-lora")
    with tempfile.TemporaryDirectory(prefix="mergesmith-extract-") as folder:
        folder = Path(folder)
        if models is not None:
            base, tuned = models / "base", models / "one"
        else:
            print(f"Building a {size_gb:g} GB Llama-shaped bf16 base and fine-tune in {folder} …", flush=True)
            base, tuned, _, _ = build_models(folder, size_gb)
        ours = [sys.executable, "-m", "guiapp", "extract-lora", "--base", str(base), "--model", str(tuned),
                "--rank", str(rank), "--overwrite", "--out"]
        theirs = [str(mergekit), "--model", str(tuned), "--base-model", str(base), "--max-rank", str(rank),
                  "--out-path"] if mergekit else None
        timed_run([*ours, str(folder / "ours")], timeout)  # warm-up: page cache, the cached capability probe
        row = {}
        for condition in ("quiet", "busy"):
            with CompetingLoad() if condition == "busy" else contextlib.nullcontext():
                row[f"ours_{condition}_s"] = timed_run([*ours, str(folder / "ours")], timeout)
                if theirs:
                    shutil.rmtree(folder / "theirs", ignore_errors=True)
                    row[f"mergekit_{condition}_s"] = timed_run([*theirs, str(folder / "theirs")], timeout)
            print(f"  {condition}: {row} ({load_average()})", flush=True)

    def shown(value: float | None) -> str:
        return f"> {timeout:.0f} s" if value is None else f"{value:.1f} s"

    print(f"\n| extract-lora rank {rank}, {size_gb:g} GB pair | ours | mergekit | mergekit / ours (goal ≥ 10) |")
    print("|---|---|---|---|")
    for condition in ("quiet", "busy"):
        mine, other = row[f"ours_{condition}_s"], row.get(f"mergekit_{condition}_s")
        ratio = "—" if mine is None or not theirs else (
            f"> {timeout / mine:.1f}×" if other is None else f"{other / mine:.1f}×")
        print(f"| {condition} | {shown(mine)} | {shown(other) if theirs else 'not installed'} | {ratio} |")
    if row["ours_quiet_s"] and row["ours_busy_s"]:
        print(f"ours busy / quiet: {row['ours_busy_s'] / row['ours_quiet_s']:.2f}× (goal ≤ 1.5)")
    print(f"({load_average()}; busy: {CompetingLoad().count} competing busy process(es))")
    print(json.dumps(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Only the 2048-wide matrices.")
    parser.add_argument("--no-end-to-end", action="store_true", help="Skip the extract_lora runs.")
    parser.add_argument("--no-table", action="store_true", help="Skip the solver table (memory and end-to-end only).")
    parser.add_argument("--busy", action="store_true",
                        help="Only the end-to-end command against mergekit-extract-lora, quiet and busy.")
    parser.add_argument("--size-gb", type=float, default=1.0, help="Model size of the --busy pair (default 1.0).")
    parser.add_argument("--timeout", type=float, default=400, help="Seconds before a --busy run is given up.")
    parser.add_argument("--models", type=Path, default=None,
                        help="A folder with base/ and one/ from merge.py's models (--busy), instead of building them.")
    parser.add_argument("--memory-probe", nargs=3, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--extraction-probe", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        memory_probe(*args.memory_probe)
        return
    if args.extraction_probe:
        extraction_probe(*args.extraction_probe)
        return
    if args.busy:
        busy_comparison(args.size_gb, 64, args.timeout, args.models)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    shapes = {k: v for k, v in SHAPES.items() if not (args.quick and "4096" in k)}
    if not args.no_table:
        rows = solver_table(shapes)
        target = [r for r in rows if "4096" in r["matrix"] and r["rank"] <= 64]
        if target:
            print(f"4096-wide, rank ≤ 64: slowest speedup {min(r['speedup'] for r in target):.0f}×, "
                  f"worst ratio to optimum {max(r['ratio'] for r in target):.4f}")
        print(f"all cases: worst ratio to optimum {max(r['ratio'] for r in rows):.4f}")
    measure_memory(4096, 4096, 256)
    if not args.no_end_to_end:
        end_to_end(hidden=2048, intermediate=5632, layers=1)


if __name__ == "__main__":
    main()
