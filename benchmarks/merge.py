"""Merge speed and memory against the I/O floor, measured in one run.

    python benchmarks/merge.py [--size-gb 1.0] [--size-gb 0.5 ...] [--methods linear,ties]

Builds Llama-shaped bf16 checkpoints (a base and two fine-tunes) of each size, then for linear,
task_arithmetic, ties and slerp prints: wall time of the merge, peak private (anonymous) memory of the
process doing it, and the ratio of the wall time to the I/O floor: reading every input tensor and writing
the output with safetensors alone, measured on the same files in the same run. The floor and the merge run
--repeat times, alternating, and the fastest of each counts (shared machines are noisy). When mergekit is installed,
the same recipes run through `mergekit-yaml` and our time over theirs is printed too.

Targets (2 CPU cores): linear and task_arithmetic ≤ 2× the floor, ties and slerp ≤ 6×; peak private memory
below 8 float32 copies of the largest tensor + 300 MB, at every model size.

    python benchmarks/merge.py --busy [--methods all|linear,ties] [--size-gb 1.0]

measures each method (`all`: the 20) on a quiet machine and again while one busy process per half of the cores
competes for the CPU (a workstation with a browser, an IDE or a training run open), in one run, quiet and busy runs
alternating, and prints the busy/quiet ratio (goal ≤ 1.5×), the cores each merge used (CPU time over wall time),
the busy/quiet ratio of one thread's fixed work run beside each merge (the host's part: how much slower a core
computes while the other is busy), and mergekit under the same load for --mergekit-methods (from
recipe_parity.py's venv, or --mergekit).

    python benchmarks/merge.py --quantized [--size-gb 1.0] [--methods linear,task_arithmetic]

merges the same models as bitsandbytes 4-bit (nf4, double quantized, quantized by bitsandbytes itself) and as FP8
(e4m3, 128x128 block scales) copies, dequantized as they are read, beside the bf16 merge, alternating, and prints
each quantized merge's time and peak private memory over the bf16 merge's. Goal: ≤ 1.3× the time, memory within
10 % (the dequantizers work tensor by tensor). The CPU time ratio (all threads) is printed too: on a machine other
work keeps busy, it shows the work dequantizing adds when the wall times are mostly waiting. The inputs of a block
are dequantized on the reading thread while the block before is merged.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from workload import ONE_THREAD_WORK, CompetingLoad, StolenTime, load_average, memory_copy_rate, mergekit_tool

_TWO = ("  - model: {one}\n    parameters: {{weight: 0.5{extra}}}\n"
        "  - model: {two}\n    parameters: {{weight: 0.5{extra}}}\n")
_BF16 = "dtype: bfloat16\n"


def _task_vectors(method: str, extra: str = "") -> str:
    return f"merge_method: {method}\nbase_model: {{base}}\nmodels:\n" + _TWO.replace("{extra}", extra) + _BF16


RECIPES = {
    "linear": "merge_method: linear\nmodels:\n" + _TWO.replace("{extra}", "") + _BF16,
    "task_arithmetic": _task_vectors("task_arithmetic"),
    "ties": _task_vectors("ties", ", density: 0.5"),
    "slerp": "merge_method: slerp\nbase_model: {base}\nmodels:\n  - model: {base}\n  - model: {one}\n"
             "parameters: {{t: 0.5}}\n" + _BF16,
    "dare_linear": _task_vectors("dare_linear", ", density: 0.5"),
    "dare_ties": _task_vectors("dare_ties", ", density: 0.5"),
    "breadcrumbs": _task_vectors("breadcrumbs", ", density: 0.8, gamma: 0.05"),
    "breadcrumbs_ties": _task_vectors("breadcrumbs_ties", ", density: 0.8, gamma: 0.05"),
    "della": _task_vectors("della", ", density: 0.5, epsilon: 0.1"),
    "della_linear": _task_vectors("della_linear", ", density: 0.5, epsilon: 0.1"),
    "sce": _task_vectors("sce").replace(_BF16, "parameters: {{select_topk: 0.5}}\n" + _BF16),
    "model_stock": _task_vectors("model_stock"),
    "ram": _task_vectors("ram"),
    "ramplus_tl": _task_vectors("ramplus_tl"),
    "karcher": "merge_method: karcher\nmodels:\n" + _TWO.replace("{extra}", "") + _BF16,
    "multislerp": _task_vectors("multislerp"),
    "nuslerp": _task_vectors("nuslerp"),
    "nearswap": "merge_method: nearswap\nbase_model: {base}\nmodels:\n  - model: {one}\nparameters: {{t: 0.001}}\n" + _BF16,
    "arcee_fusion": "merge_method: arcee_fusion\nbase_model: {base}\nmodels:\n  - model: {one}\n" + _BF16,
    "passthrough": "merge_method: passthrough\nslices:\n  - sources:\n      - model: {one}\n        layer_range: [0, {half}]\n"
                   "  - sources:\n      - model: {two}\n        layer_range: [{half}, {layers}]\n" + _BF16,
}
QUANTIZED_TIME_GOAL, QUANTIZED_MEMORY_GOAL = 1.3, 1.1
TARGETS = {"linear": 2.0, "task_arithmetic": 2.0, "ties": 6.0, "slerp": 6.0}
OTHER_TARGET = 6.0  # the methods without a target of their own (--methods all)
BUSY_GOAL = 1.5  # busy time over quiet time

_OURS = textwrap.dedent("""
    import resource, sys, time
    from pathlib import Path
    from guiapp.system.memory import configure_heaps
    configure_heaps()  # as the mergesmith command does when it starts
    from guiapp.merging.merge import MergeSettings, run_merge
    from guiapp.merging.recipe import load_recipe
    recipe = load_recipe(Path(sys.argv[1]))
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    run_merge(recipe, MergeSettings(Path(sys.argv[2])))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)  # CPU seconds, all threads
    print(wall)
""")

_FLOOR = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from safetensors import safe_open
    from safetensors.torch import save_file
    inputs, output = [Path(p) for p in sys.argv[1].split(",")], Path(sys.argv[2])
    start = time.perf_counter()
    last = {}
    for folder in inputs:
        for file in sorted(folder.glob("*.safetensors")):
            with safe_open(file, framework="pt") as handle:
                # clone() copies out of the memory map, so every byte is really read
                last.update({name: handle.get_tensor(name).clone() for name in handle.keys()})
    output.mkdir()
    save_file(last, output / "model.safetensors")
    print(time.perf_counter() - start)
""")


def _private_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_measured(command: list[str]) -> tuple[float, int, str]:
    """Run `command`; return (seconds it printed, or wall time; peak anonymous memory; stdout)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _private_bytes(process.pid))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    started = time.perf_counter()
    sampler.start()
    out, err = process.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed:\n{err[-3000:]}")
    try:
        seconds = float(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        seconds = wall
    return seconds, peak, out


def _max_difference(ours: Path, theirs: Path) -> float:
    """The largest |ours − theirs| over all tensors, relative to the largest |theirs| of that tensor."""
    from safetensors.torch import load_file

    def load(folder: Path) -> dict:
        tensors = {}
        for file in folder.glob("*.safetensors"):
            tensors.update(load_file(file))
        return tensors

    a, b = load(ours), load(theirs)
    worst = 0.0
    for name, tensor in b.items():
        if name in a:
            scale = float(tensor.float().abs().max()) or 1.0
            worst = max(worst, float((a[name].float() - tensor.float()).abs().max()) / scale)
    return worst


def build_models(folder: Path, size_gb: float) -> tuple[Path, Path, Path, int]:
    import torch

    from guiapp.checkpoints.samples import LlamaShape, llama_config, llama_tensors, write_checkpoint

    per_layer = 2 * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 5632)  # bf16 bytes
    outer = 2 * 2 * 32000 * 2048
    layers = max(1, round((size_gb * 1e9 - outer) / per_layer))
    shape = LlamaShape(hidden=2048, intermediate=5632, layers=layers, heads=16, kv_heads=4, vocab=32000)
    generator = torch.Generator().manual_seed(0)
    base_tensors = {n: t.to(torch.bfloat16) for n, t in llama_tensors(shape, generator).items()}
    config = llama_config(shape, torch.bfloat16)
    base = write_checkpoint(folder / "base", base_tensors, config, shards=2)
    tuned = []
    for seed, name in ((1, "one"), (2, "two")):
        generator = torch.Generator().manual_seed(seed)
        tensors = {n: (t.float() + torch.randn(t.shape, generator=generator) * 0.002).to(torch.bfloat16)
                   for n, t in base_tensors.items()}
        tuned.append(write_checkpoint(folder / name, tensors, config, shards=2))
    largest = max(t.numel() for t in base_tensors.values()) * 4
    return base, tuned[0], tuned[1], largest


def models_in(folder: Path, size_gb: float) -> tuple[Path, Path, Path]:
    """The base and two fine-tunes in `folder`: those a finished earlier build left there (its `complete` marker,
    written last), or built afresh; an unfinished build is replaced, and nothing outside these three folders is
    touched, so the benchmarks can share a cache folder."""
    names = ("base", "one", "two")
    if not (folder / "complete").exists():
        for name in names:
            shutil.rmtree(folder / name, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"  building three {size_gb:g} GB models in {folder} …", flush=True)
        build_models(folder, size_gb)
        (folder / "complete").write_text(f"{size_gb:g} GB\n")
    base, one, two = (folder / name for name in names)
    return base, one, two


def _quantize_bnb4(name: str, weight):
    import bitsandbytes.functional as F

    packed, state = F.quantize_4bit(weight, quant_type="nf4", compress_statistics=True, blocksize=64)
    return {name: packed, **{f"{name}.{key}": value for key, value in state.as_dict(packed=True).items()}}


def _quantize_fp8(name: str, weight, block: int = 128):
    import torch

    rows, cols = -(-weight.shape[0] // block), -(-weight.shape[1] // block)
    padded = torch.nn.functional.pad(weight.float(), (0, cols * block - weight.shape[1], 0, rows * block - weight.shape[0]))
    tiles = padded.view(rows, block, cols, block)
    scale = tiles.abs().amax(dim=(1, 3)).clamp_min(1e-12) / torch.finfo(torch.float8_e4m3fn).max
    codes = (tiles / scale[:, None, :, None]).view(rows * block, cols * block)[: weight.shape[0], : weight.shape[1]]
    return {name: codes.to(torch.float8_e4m3fn), f"{name}_scale_inv": scale}


QUANTIZERS = {
    "bnb4": (_quantize_bnb4, {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                              "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"}),
    "fp8": (_quantize_fp8, {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}),
}


def quantized_copy(source: Path, target: Path, kind: str) -> Path:
    """`source` (a sharded bf16 model) with its linear weights quantized as `kind` (QUANTIZERS), shard by shard."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    quantize, settings = QUANTIZERS[kind]
    target.mkdir(parents=True)
    weight_map = {}
    for file in sorted(source.glob("*.safetensors")):
        stored = {}
        with safe_open(file, framework="pt") as handle:
            for name in handle.keys():
                tensor = handle.get_tensor(name)
                stored.update(quantize(name, tensor) if name.endswith("_proj.weight") else {name: tensor})
        save_file({n: t.contiguous() for n, t in stored.items()}, target / file.name, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(stored, file.name))
    (target / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = json.loads((source / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "quantization_config": settings}))
    return target


def quantized_table(folder: Path, size_gb: float, methods: list[str], repeat: int) -> list[dict]:
    """Each method on the bf16 models and on their 4-bit and FP8 copies, runs alternating; the fastest run of each
    and the largest peak count."""
    models = models_in(folder, size_gb)
    copies = {"bf16": models}
    for kind in QUANTIZERS:
        if not (folder / f"{kind}-complete").exists():
            print(f"  quantizing the three models as {kind} …", flush=True)
            for model in models:
                shutil.rmtree(folder / f"{kind}-{model.name}", ignore_errors=True)
                quantized_copy(model, folder / f"{kind}-{model.name}", kind)
            (folder / f"{kind}-complete").write_text("done\n")
        copies[kind] = tuple(folder / f"{kind}-{model.name}" for model in models)
    rows = []
    for method in methods:
        runs: dict[str, list[tuple[float, int]]] = {kind: [] for kind in copies}
        for _ in range(repeat):
            for kind, (base, one, two) in copies.items():
                recipe = folder / f"{method}-{kind}.yml"
                recipe.write_text(recipe_text(method, base, one, two))
                shutil.rmtree(folder / "out", ignore_errors=True)
                seconds, peak, out = run_measured([sys.executable, "-c", _OURS, str(recipe), str(folder / "out")])
                runs[kind].append((seconds, peak, float(out.split()[-2])))
        bf16_time, bf16_peak = min(r[0] for r in runs["bf16"]), max(r[1] for r in runs["bf16"])
        bf16_cpu = min(r[2] for r in runs["bf16"])
        for kind in QUANTIZERS:
            seconds, peak, cpu = (min(r[0] for r in runs[kind]), max(r[1] for r in runs[kind]),
                                  min(r[2] for r in runs[kind]))
            row = {"method": method, "input": kind, "seconds": round(seconds, 2), "bf16_seconds": round(bf16_time, 2),
                   "time_ratio": round(seconds / bf16_time, 2), "cpu_ratio": round(cpu / bf16_cpu, 2),
                   "peak_private_mb": round(peak / 1e6),
                   "bf16_peak_private_mb": round(bf16_peak / 1e6), "memory_ratio": round(peak / bf16_peak, 2)}
            verdict = ("ok" if row["time_ratio"] <= QUANTIZED_TIME_GOAL and row["memory_ratio"] <= QUANTIZED_MEMORY_GOAL
                       else "MISSED")
            print(f"  {method:<16} {kind:<5} {seconds:7.2f} s vs bf16 {bf16_time:6.2f} s = {row['time_ratio']:.2f}× "
                  f"(≤ {QUANTIZED_TIME_GOAL})  peak private {peak / 1e6:6.0f} MB vs {bf16_peak / 1e6:6.0f} MB = "
                  f"{row['memory_ratio']:.2f}× (≤ {QUANTIZED_MEMORY_GOAL})  {verdict}; CPU time "
                  f"{row['cpu_ratio']:.2f}× the bf16 merge's", flush=True)
            rows.append(row)
    shutil.rmtree(folder / "out", ignore_errors=True)
    return rows


def recipe_text(method: str, base: Path, one: Path, two: Path) -> str:
    layers = json.loads((base / "config.json").read_text())["num_hidden_layers"]
    return RECIPES[method].format(base=base, one=one, two=two, layers=layers, half=layers // 2)


def timed_seconds(command: list[str]) -> tuple[float, float]:
    """The wall and CPU seconds of the work `command` timed itself (_OURS prints CPU, then wall), run without
    sampling its memory: the busy table shows no memory, and a sampler waking every few milliseconds would be one
    more load on the CPU."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed:\n{done.stderr[-3000:]}")
    cpu, wall = (float(line) for line in done.stdout.strip().splitlines()[-2:])
    return wall, cpu


def timed_run(command: list[str], timeout: float) -> float | None:
    """Wall seconds of `command`, or None when it did not finish within `timeout` (then it is killed)."""
    start = time.perf_counter()
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def busy_table(folder: Path, size_gb: float, methods: list[str], repeat: int, mergekit: str | None,
               timeout: float, mergekit_methods: set[str]) -> list[dict]:
    """Each method quiet and under a competing load, ours (fastest of `repeat`) and, for `mergekit_methods`,
    mergekit's (once each). Our quiet and busy runs alternate, so that a slower minute of a shared host falls on
    both sides of the ratio rather than on one. After each run, under the same condition, one thread's fixed work
    (ONE_THREAD_WORK): its busy/quiet ratio is the host's part of the method's."""
    base, one, two = models_in(folder, size_gb)  # with --workdir, an earlier run's
    rows = []
    for method in methods:
        recipe = folder / f"{method}.yml"
        recipe.write_text(recipe_text(method, base, one, two))
        row: dict = {"method": method}
        runs: dict[str, list[tuple[float, float]]] = {"quiet": [], "busy": []}  # (wall, CPU) seconds
        alone: dict[str, list[tuple[float, float]]] = {"quiet": [], "busy": []}  # ONE_THREAD_WORK's
        stolen, copy_rate_before = StolenTime(), memory_copy_rate()
        for _ in range(repeat):
            for condition in ("quiet", "busy"):
                with CompetingLoad() if condition == "busy" else contextlib.nullcontext():
                    shutil.rmtree(folder / f"out-{method}", ignore_errors=True)
                    runs[condition].append(timed_seconds([sys.executable, "-c", _OURS, str(recipe),
                                                          str(folder / f"out-{method}")]))
                    alone[condition].append(timed_seconds([sys.executable, "-c", ONE_THREAD_WORK]))
        for condition in ("quiet", "busy"):
            wall, cpu = min(runs[condition])
            row[f"ours_{condition}_s"] = round(wall, 2)
            row[f"cores_used_{condition}"] = round(cpu / wall, 2)
            if mergekit and method in mergekit_methods:
                with CompetingLoad() if condition == "busy" else contextlib.nullcontext():
                    shutil.rmtree(folder / f"mergekit-{method}", ignore_errors=True)
                    seconds = timed_run([mergekit, str(recipe), str(folder / f"mergekit-{method}"), "--lazy-unpickle"],
                                        timeout)
                row[f"mergekit_{condition}_s"] = None if seconds is None else round(seconds, 2)
            print(f"  {method:<16} {condition:<5} ours {row[f'ours_{condition}_s']:7.2f} s"
                  f" (runs {', '.join(f'{wall:.2f}' for wall, _ in runs[condition])};"
                  f" {row[f'cores_used_{condition}']:.2f} cores used)"
                  + (f"  mergekit {_seconds(row[f'mergekit_{condition}_s'], timeout)}"
                     if f"mergekit_{condition}_s" in row else ""), flush=True)
        row["busy_over_quiet"] = round(row["ours_busy_s"] / row["ours_quiet_s"], 2)
        alone_quiet, alone_busy = (min(wall for wall, _ in alone[condition]) for condition in ("quiet", "busy"))
        row["one_thread_busy_over_quiet"] = round(alone_busy / alone_quiet, 2)
        # The goal is judged on the fastest runs; the medians' ratio shows how much one lucky run moved it.
        medians = {condition: statistics.median(wall for wall, _ in runs[condition]) for condition in runs}
        row["busy_over_quiet_of_medians"] = round(medians["busy"] / medians["quiet"], 2)
        row["memory_copy_gb_s"] = [round(copy_rate_before, 1), round(memory_copy_rate(), 1)]
        print(f"  {method:<16} ({load_average()}; {stolen.since()}; memory copies at"
              f" {row['memory_copy_gb_s'][0]} GB/s before, {row['memory_copy_gb_s'][1]} after; one thread alone"
              f" {alone_quiet:.2f} s quiet, {alone_busy:.2f} s busy)", flush=True)
        rows.append(row)
        shutil.rmtree(folder / f"out-{method}", ignore_errors=True)
        shutil.rmtree(folder / f"mergekit-{method}", ignore_errors=True)
    return rows


def _seconds(value: float | None, timeout: float) -> str:
    return f"> {timeout:.0f} s" if value is None else f"{value:.1f} s"


def print_busy_table(rows: list[dict], mergekit: str | None, timeout: float) -> None:
    if not any("mergekit_busy_s" in row for row in rows):
        mergekit = None  # installed, but no method of this run went through it: no empty columns
    # Cores used: the merge's CPU time over its wall time. A merge that keeps both cores busy when quiet has about
    # one left under the competing load, which bounds its busy/quiet ratio from below near the quiet figure. One
    # thread alone: how much slower a core of this host computes while the load runs (the host's part). The quiet
    # cores over the busy ones, times that, is about the ratio of a merge that loses nothing else to the load.
    print(f"\n| method | ours quiet | ours busy | busy/quiet (goal ≤ {BUSY_GOAL}) | of the medians |"
          " cores used quiet / busy | one thread alone, busy/quiet |"
          + (" mergekit quiet | mergekit busy | busy: ours vs mergekit |" if mergekit else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|---|" if mergekit else ""))
    for row in rows:
        line = (f"| {row['method']} | {row['ours_quiet_s']:.1f} s | {row['ours_busy_s']:.1f} s | "
                f"{row['busy_over_quiet']:.2f}× {'ok' if row['busy_over_quiet'] <= BUSY_GOAL else 'MISSED'} | "
                f"{row['busy_over_quiet_of_medians']:.2f}× | "
                f"{row['cores_used_quiet']:.2f} / {row['cores_used_busy']:.2f} | "
                f"{row['one_thread_busy_over_quiet']:.2f}× |")
        if mergekit and "mergekit_busy_s" not in row:
            line += " | | |"
        elif mergekit:
            theirs = row["mergekit_busy_s"]
            ahead = (f"{theirs / row['ours_busy_s']:.1f}× faster" if theirs is not None
                     else f"> {timeout / row['ours_busy_s']:.1f}× faster")
            line += (f" {_seconds(row['mergekit_quiet_s'], timeout)} | {_seconds(theirs, timeout)} | {ahead} |")
        print(line)
    print(f"({load_average()}; busy: {CompetingLoad().count} competing busy process(es))")
    rates = [rate for row in rows for rate in row.get("memory_copy_gb_s", [])]
    if rates:
        # A host whose memory bandwidth moves during the run slows the methods measured then, quiet and busy alike.
        print(f"(memory copies on this host ran at {min(rates):.1f}–{max(rates):.1f} GB/s during the run; where"
              f" a method's rate fell well below the others', its times are not comparable with theirs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, action="append", help="model size in GB (repeatable); default 1.0")
    parser.add_argument("--methods", default=None,
                        help="comma-separated, or 'all' (default: " + ",".join(TARGETS) + "; with --busy: linear,ties)")
    parser.add_argument("--mergekit-methods", default="linear,task_arithmetic,ties,slerp",
                        help="the methods that also run through mergekit with --busy (it takes minutes each)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of the floor and of our merge, alternating; the fastest of each counts")
    parser.add_argument("--mergekit", default=shutil.which("mergekit-yaml"),
                        help="path of mergekit-yaml (e.g. from another virtual environment); default: on PATH")
    parser.add_argument("--busy", action="store_true",
                        help="measure each method quiet and under a competing CPU load, with mergekit if installed")
    parser.add_argument("--quantized", action="store_true",
                        help="merge 4-bit and FP8 copies of the models beside the bf16 ones (needs bitsandbytes)")
    parser.add_argument("--mergekit-timeout", type=float, default=300,
                        help="seconds after which a mergekit run is stopped and shown as '> N s' (--busy)")
    args = parser.parse_args()
    sizes = args.size_gb or [1.0]
    mergekit = args.mergekit or (str(mergekit_tool("mergekit-yaml") or "") or None)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mergesmith-bench-"))
    if args.quantized:
        folder = work / f"{sizes[0]:g}GB"
        folder.mkdir(parents=True, exist_ok=True)
        print(f"Quantized-input benchmark in {folder} ({load_average()})", flush=True)
        rows = quantized_table(folder, sizes[0], (args.methods or "linear,task_arithmetic").split(","), args.repeat)
        print(json.dumps(rows, indent=2))
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
        return
    if args.busy:
        methods = list(RECIPES) if args.methods == "all" else (args.methods or "linear,ties").split(",")
        folder = work / f"{sizes[0]:g}GB"
        folder.mkdir(parents=True, exist_ok=True)
        print(f"Busy-machine benchmark in {folder} ({load_average()}); mergekit: {mergekit or 'not installed'}",
              flush=True)
        rows = busy_table(folder, sizes[0], methods, args.repeat, mergekit, args.mergekit_timeout,
                          set(args.mergekit_methods.split(",")))
        print_busy_table(rows, mergekit, args.mergekit_timeout)
        print(json.dumps(rows, indent=2))
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
        return
    methods = list(RECIPES) if args.methods == "all" else (args.methods or ",".join(TARGETS)).split(",")
    rows = []
    for size in sizes:
        folder = work / f"{size:g}GB"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        print(f"\nBuilding three {size:g} GB Llama-shaped bf16 models in {folder} …", flush=True)
        base, one, two, largest = build_models(folder, size)
        model_bytes = sum(f.stat().st_size for f in base.glob("*.safetensors"))
        budget = 8 * largest + 300e6
        for method in methods:
            recipe = folder / f"{method}.yml"
            text = recipe_text(method, base, one, two)
            recipe.write_text(text)
            inputs = [model for model in (base, one, two) if f"model: {model}\n" in text]
            floors, ours_runs, peaks = [], [], []
            for _ in range(args.repeat):
                shutil.rmtree(folder / f"floor-{method}", ignore_errors=True)
                shutil.rmtree(folder / f"out-{method}", ignore_errors=True)
                floors.append(run_measured([sys.executable, "-c", _FLOOR, ",".join(map(str, inputs)),
                                            str(folder / f"floor-{method}")])[0])
                seconds, peak, _ = run_measured([sys.executable, "-c", _OURS, str(recipe), str(folder / f"out-{method}")])
                ours_runs.append(seconds)
                peaks.append(peak)
            floor, ours, peak = min(floors), min(ours_runs), max(peaks)
            row = {
                "size_gb": round(model_bytes / 1e9, 2), "method": method, "seconds": round(ours, 2),
                "floor_seconds": round(floor, 2), "ratio_to_floor": round(ours / floor, 2),
                "target_ratio": TARGETS.get(method, OTHER_TARGET), "peak_private_mb": round(peak / 1e6),
                "memory_budget_mb": round(budget / 1e6),
            }
            if mergekit:
                start = time.perf_counter()
                subprocess.run([mergekit, str(recipe), str(folder / f"mergekit-{method}"), "--lazy-unpickle"],
                               check=True, capture_output=True)
                theirs = time.perf_counter() - start
                row["mergekit_seconds"] = round(theirs, 2)
                row["ours_over_mergekit"] = round(ours / theirs, 3)
                row["max_difference_vs_mergekit"] = _max_difference(folder / f"out-{method}", folder / f"mergekit-{method}")
                shutil.rmtree(folder / f"mergekit-{method}", ignore_errors=True)
            rows.append(row)
            verdict = "ok" if row["ratio_to_floor"] <= row["target_ratio"] and peak <= budget else "MISSED"
            extra = (f", mergekit {row['mergekit_seconds']} s (ours/theirs {row['ours_over_mergekit']}), largest "
                     f"difference {row['max_difference_vs_mergekit']:.2g}") if mergekit else ""
            print(f"  {method:<16} {ours:7.2f} s  floor {floor:6.2f} s  ratio {ours / floor:5.2f} (≤ {row['target_ratio']})"
                  f"  peak private {peak / 1e6:7.0f} MB (budget {budget / 1e6:.0f}){extra}  {verdict}", flush=True)
            shutil.rmtree(folder / f"out-{method}", ignore_errors=True)
            shutil.rmtree(folder / f"floor-{method}", ignore_errors=True)
    if not mergekit:
        print("\n(mergekit is not installed: `pip install mergekit` to compare side by side.)")
    print(json.dumps(rows, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
