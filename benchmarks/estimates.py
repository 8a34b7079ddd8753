"""Time estimates against real jobs: estimate / actual for merges (linear, TIES), extractions and applications
of three model sizes (goal: every ratio within 0.67–1.5).

    python benchmarks/estimates.py [--sizes small medium large] [--keep DIR]

Each job runs as the command line runs it, a new `mergesmith` process, and "actual" is that process's wall time
(start-up included). The estimate is the one `--dry-run` prints: the same functions, given the dry run's own
wall time as start-up (what the CLI measures in itself), and this run's fresh config folder as the history of
finished jobs, so the first job of a kind is estimated from the probe's reference rates alone and later sizes
from the jobs before them (the "basis" column says which). The machine's probe comes from its usual cache.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

SIZES = {  # bfloat16 Llama-style models: about 40 MB, 150 MB and 330 MB each
    "small": dict(hidden=512, intermediate=1408, layers=4, heads=8, kv_heads=4, vocab=8000),
    "medium": dict(hidden=768, intermediate=2048, layers=8, heads=12, kv_heads=4, vocab=16000),
    "large": dict(hidden=1024, intermediate=2816, layers=10, heads=16, kv_heads=8, vocab=24000),
}
RANK = 16


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=tuple(SIZES), default=list(SIZES))
    parser.add_argument("--keep", type=Path, default=None, help="Work in this folder and keep it.")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="mergesmith-estimates-"))
    os.environ["MERGESMITH_CONFIG_DIR"] = str(root / "config")  # a fresh history, for this process and its jobs
    from guiapp.engine.samples import LlamaShape, write_llama, write_llama_finetune  # noqa: PLC0415 - torch

    rows = []
    print(f"{'job':<22} {'input':>9} {'estimate':>18} {'est. s':>7} {'actual s':>8} {'ratio':>6}  basis")
    for size in args.sizes:
        folder = root / size
        shape = LlamaShape(**SIZES[size])
        base = write_llama(folder / "base", shape, seed=0)
        tune_a = write_llama_finetune(folder / "tune-a", base, seed=1)
        tune_b = write_llama_finetune(folder / "tune-b", base, seed=2)
        linear = _recipe(folder / "linear.yml", {"merge_method": "linear", "models": [
            {"model": str(tune_a), "parameters": {"weight": 0.5}}, {"model": str(tune_b), "parameters": {"weight": 0.5}}]})
        ties = _recipe(folder / "ties.yml", {"merge_method": "ties", "base_model": str(base), "models": [
            {"model": str(tune_a), "parameters": {"weight": 1.0, "density": 0.5}},
            {"model": str(tune_b), "parameters": {"weight": 1.0, "density": 0.5}}]})
        adapter = folder / "adapter"
        jobs = [
            ("merge linear", ["merge", str(linear), str(folder / "out-linear")]),
            ("merge ties", ["merge", str(ties), str(folder / "out-ties")]),
            ("extract", ["extract-lora", "--base", str(base), "--model", str(tune_a), "--out", str(adapter),
                         "--rank", str(RANK)]),
            ("apply", ["apply-lora", "--base", str(base), "--adapter", str(adapter), "--out", str(folder / "applied")]),
        ]
        for name, command in jobs:
            dry_seconds = _timed([*command, "--dry-run"])
            estimate, input_bytes = _estimate(name, base, tune_a, adapter, command, dry_seconds)
            actual = _timed(command)
            ratio = estimate.seconds / actual
            rows.append(ratio)
            print(f"{size + ' ' + name:<22} {input_bytes / 1e6:>6.0f} MB {str(estimate):>18} "
                  f"{estimate.seconds:>7.1f} {actual:>8.1f} {ratio:>6.2f}  {estimate.basis}", flush=True)
    inside = sum(0.67 <= r <= 1.5 for r in rows)
    print(f"\n{inside} of {len(rows)} ratios within 0.67–1.5 (worst {min(rows):.2f} / {max(rows):.2f}). Work: {root}")
    return 0


def _recipe(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def _timed(arguments: list[str]) -> float:
    """Wall seconds of `mergesmith ARGUMENTS` as a new process; a failure stops the benchmark with its output."""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "guiapp", *arguments], capture_output=True, text=True,
                            env=os.environ, check=False)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"mergesmith {' '.join(arguments)} failed:\n{result.stdout}\n{result.stderr}")
    return elapsed


def _estimate(name: str, base: Path, tune: Path, adapter: Path, command: list[str], startup: float):
    """The estimate the dry run printed, made here by the same functions with the dry run's wall time as start-up."""
    from guiapp.engine.merge import plan_merge  # noqa: PLC0415
    from guiapp.engine.recipe import load_recipe  # noqa: PLC0415
    from guiapp.engine.sources import read_headers  # noqa: PLC0415
    from guiapp.hub.references import ModelRef  # noqa: PLC0415
    from guiapp.jobs.estimates import estimate_apply, estimate_extraction, estimate_merge  # noqa: PLC0415
    from guiapp.system.probe import cached_probe  # noqa: PLC0415

    probe = cached_probe()
    destination = Path(command[-1])
    if name.startswith("merge"):
        plan = plan_merge(load_recipe(Path(command[1])))
        return estimate_merge(plan, "cpu", destination, probe, startup_seconds=startup).time, plan.input_bytes
    base_headers = read_headers(ModelRef.parse(str(base)))
    base_bytes = sum(i.nbytes for i in base_headers.tensors.values())
    if name == "extract":
        estimate = estimate_extraction(base_headers, read_headers(ModelRef.parse(str(tune))), "cpu", destination,
                                       probe, rank=RANK, startup_seconds=startup)
        return estimate.time, 2 * base_bytes
    return estimate_apply(base_headers, "cpu", destination, probe, startup_seconds=startup).time, base_bytes


if __name__ == "__main__":
    sys.exit(main())
