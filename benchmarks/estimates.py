"""Time estimates against real jobs: estimate / actual for merges (linear, TIES), extractions, applications,
Try's Generate and Perplexity, of three model sizes (goal: every ratio within 0.67–1.5); the live time left a
fifth of the way into each job against the time that was really left (same goal); and the rank preview's time
against the extraction's on the same pair (goal: at most 0.2).

    python benchmarks/estimates.py [--sizes small medium large] [--keep DIR]

Each job runs as the command line runs it, a new `mergesmith` process, and "actual" is that process's wall time
(start-up included). The estimate is the one `--dry-run` prints: the same functions, given the dry run's own
wall time as start-up (what the CLI measures in itself); `try` and `perplexity` have no dry run, so theirs is the
estimate the job itself made, with the time its process had spent until then as start-up (it loads more than a
dry run: transformers and the tokenizer), and this run's fresh config folder as the history of
finished jobs, so the first job of a kind is estimated from the probe's reference rates alone and later sizes
from the jobs before them (the "basis" column says which). The machine's probe comes from its usual cache.
"busy" is `machine_slowdown()` as the job started (load per core); "work" is the job's time past start-up and
the fixed cost against the estimate's, which is what a reference rate would be multiplied by to fit this job.

The time left: each job's process records its progress events (a listener added in the child, see `_child`); at
the first event of the job's main stage past 20 % of it, the ETA shown then against the time from then to the
stage's last event; "cores" says how many cores the job got before that point and after it (a time left that
missed because other programs took the cores halfway shows as a drop). The rank preview runs in this process (as
in the window: torch loaded, the files just read by the jobs) and is compared with the extraction's time in its process from its first progress event to its last
(reading, decomposing and writing, without the process's start-up), as in the window.
"""

from __future__ import annotations

import argparse
import json
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
MAX_NEW_TOKENS = 48
# The stage whose progress stands for the job's (its ETA is read a fifth of the way in).
MAIN_STAGES = ("Merging", "Extracting", "Applying", "Generating", "Perplexity")
EVENTS_VARIABLE = "MERGESMITH_BENCHMARK_EVENTS"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=tuple(SIZES), default=list(SIZES))
    parser.add_argument("--keep", type=Path, default=None, help="Work in this folder and keep it.")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="mergesmith-estimates-"))
    os.environ["MERGESMITH_CONFIG_DIR"] = str(root / "config")  # a fresh history, for this process and its jobs
    from guiapp.checkpoints.samples import (  # noqa: PLC0415 - torch
        LlamaShape,
        write_byte_tokenizer,
        write_llama,
        write_llama_finetune,
    )
    from guiapp.checkpoints.sources import read_headers  # noqa: PLC0415
    from guiapp.hub.references import ModelRef  # noqa: PLC0415
    from guiapp.jobs.durations import JOB_OVERHEAD_SECONDS, machine_slowdown  # noqa: PLC0415

    ratios, etas, previews = [], [], []
    print(f"{'job':<22} {'input':>9} {'estimate':>18} {'est. s':>7} {'actual s':>8} {'ratio':>6} {'busy':>5} "
          f"{'work':>5} {'ETA@20%':>7} {'cores':>9}  basis")
    root.mkdir(parents=True, exist_ok=True)
    text = root / "text.txt"
    text.write_text((Path(__file__).parent.parent / "docs" / "window.md").read_text(encoding="utf-8")[:3000])
    for size in args.sizes:
        folder = root / size
        shape = LlamaShape(**SIZES[size])
        base = write_llama(folder / "base", shape, seed=0)
        write_byte_tokenizer(base)  # Generate and Perplexity need one; the fine-tunes take the base's files
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
            ("generate", ["try", str(base), "--prompt", "The model", "--max-new-tokens", str(MAX_NEW_TOKENS)]),
            ("perplexity", ["perplexity", str(base), "--text", str(text)]),
        ]
        startup = 0.0
        for name, command in jobs:
            if name not in ("generate", "perplexity"):
                startup = _timed([*command, "--dry-run"])[0]
            busy = machine_slowdown()
            if name in ("generate", "perplexity"):
                actual, events = _timed(command, folder / f"{name}.events")
                estimate, startup = _own_estimate(events)
                input_bytes = sum(info.nbytes for info in read_headers(ModelRef.parse(str(base))).tensors.values())
                events = [event for event in events if "stage" in event]
            else:
                estimate, input_bytes = _estimate(name, base, tune_a, command, startup)
                actual, events = _timed(command, folder / f"{name.replace(' ', '-')}.events")
            ratio = estimate.seconds / actual
            ratios.append(ratio)
            eta = _eta_at_a_fifth(events)
            cores = _cores_around_a_fifth(events)
            if eta is not None:
                etas.append(eta)
            fixed = startup + JOB_OVERHEAD_SECONDS * busy  # as the estimate counts it
            work = (actual - fixed) / max(1e-9, estimate.seconds - fixed)
            print(f"{size + ' ' + name:<22} {input_bytes / 1e6:>6.0f} MB {str(estimate):>18} "
                  f"{estimate.seconds:>7.1f} {actual:>8.1f} {ratio:>6.2f} {busy:>5.1f} {work:>5.2f} "
                  f"{'' if eta is None else f'{eta:.2f}':>7} {cores:>9}  {estimate.basis} (start-up {startup:.1f} s)",
                  flush=True)
            if name == "extract":
                # The job as the window runs it: from its first progress event to its last, without start-up.
                extraction_work = events[-1]["at"] - events[0]["at"] if len(events) > 1 else actual - startup
                # The first preview in a process also loads torch's linear algebra (0.4 s), as the window's first.
                first, again = _preview_seconds(base, tune_a), _preview_seconds(base, tune_a)
                previews.append(first / extraction_work)
                print(f"{size + ' rank preview':<22} {first:>6.2f} s ({again:.2f} s again) against the extraction's "
                      f"{extraction_work:.1f} s: {first / extraction_work:.2f} ({again / extraction_work:.2f}) "
                      f"(busy {machine_slowdown():.1f})", flush=True)
    inside = sum(0.67 <= r <= 1.5 for r in ratios)
    print(f"\n{inside} of {len(ratios)} ratios within 0.67–1.5 (worst {min(ratios):.2f} / {max(ratios):.2f}).")
    if etas:
        print(f"{sum(0.67 <= r <= 1.5 for r in etas)} of {len(etas)} times left a fifth of the way in within "
              f"0.67–1.5 (worst {min(etas):.2f} / {max(etas):.2f}).")
    if previews:
        print(f"Rank preview / extraction: worst {max(previews):.2f} (goal at most 0.2).")
    print(f"Work: {root}")
    return 0


def _eta_at_a_fifth(events: list[dict]) -> float | None:
    """The time left the job showed at the first event of its main stage past 20 % of it, against the time that
    was really left of the stage then; None when the stage had no such event with a time left."""
    stage = [e for e in events if e["stage"].startswith(MAIN_STAGES)]
    if not stage:
        return None
    # A job of several models has a stage per model: the first one stands for the job's.
    stage = [e for e in stage if e["stage"] == stage[0]["stage"]]
    end = stage[-1]["at"]
    for event in stage:
        if event["fraction"] >= 0.2 and event["eta"] is not None and end > event["at"]:
            return event["eta"] / (end - event["at"])
    return None


def _cores_around_a_fifth(events: list[dict]) -> str:
    """The cores the job's process used on average (CPU seconds per second) in its main stage before the point
    where its time left is read, and after it ("1.6→0.8"): a time left that missed because other programs took the
    cores from the job halfway shows as a drop. Empty when the stage has no such point."""
    stage = [e for e in events if e["stage"].startswith(MAIN_STAGES)]
    if not stage:
        return ""
    stage = [e for e in stage if e["stage"] == stage[0]["stage"]]
    point = next((e for e in stage if e["fraction"] >= 0.2 and e["eta"] is not None and stage[-1]["at"] > e["at"]),
                 None)
    if point is None or point["at"] <= stage[0]["at"]:
        return ""
    before = (point["cpu"] - stage[0]["cpu"]) / (point["at"] - stage[0]["at"])
    after = (stage[-1]["cpu"] - point["cpu"]) / (stage[-1]["at"] - point["at"])
    return f"{before:.1f}→{after:.1f}"


def _preview_seconds(base: Path, tune: Path) -> float:
    """The rank preview of the pair as the window runs it, in this process."""
    from guiapp.lora.spectrum import preview_spectra  # noqa: PLC0415

    started = time.monotonic()
    preview_spectra(str(base), str(tune))
    return time.monotonic() - started


def _own_estimate(events: list[dict]):
    """The estimate a Generate or Perplexity job made of itself, plus the seconds its process had spent by then
    (what it would have said as a whole), and those seconds."""
    from guiapp.system.resources import TimeEstimate  # noqa: PLC0415

    made = next(event for event in events if "estimate" in event)
    startup = made["startup"]
    return TimeEstimate(seconds=startup + made["estimate"], basis=made["basis"], low=startup + made["low"],
                        high=startup + made["high"]), startup


def _recipe(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def _timed(arguments: list[str], events: Path | None = None) -> tuple[float, list[dict]]:
    """Wall seconds of `mergesmith ARGUMENTS` as a new process, and its progress events when `events` names a file
    for them; a failure stops the benchmark with its output."""
    env = {**os.environ, EVENTS_VARIABLE: str(events)} if events else os.environ
    started = time.monotonic()
    result = subprocess.run([sys.executable, __file__, "--child", *arguments], capture_output=True, text=True,
                            env=env, check=False)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"mergesmith {' '.join(arguments)} failed:\n{result.stdout}\n{result.stderr}")
    if events is None or not events.exists():
        return elapsed, []
    return elapsed, [json.loads(line) for line in events.read_text().splitlines()]


def _child(arguments: list[str]) -> int:
    """`mergesmith ARGUMENTS` in this process, each progress event also written to the file the parent named
    (time since start, CPU seconds of the process, stage, fraction, ETA, units done of total, item)."""
    from guiapp import progress  # noqa: PLC0415
    from guiapp.__main__ import main as mergesmith  # noqa: PLC0415
    from guiapp.jobs import estimates  # noqa: PLC0415

    target = os.environ.get(EVENTS_VARIABLE)
    if target:
        sink = open(target, "w", encoding="utf-8")  # noqa: SIM115 - open for the process's life
        started = time.monotonic()
        original = progress.Progress.__init__

        def recording(self, on_event=None, on_log=None, cancel=None, pause_at=None) -> None:
            def both(event) -> None:
                sink.write(json.dumps({"at": time.monotonic() - started, "cpu": time.process_time(),
                                       "stage": event.stage,
                                       "fraction": event.fraction, "eta": event.eta, "done": event.done,
                                       "total": event.total, "item": event.item}) + "\n")
                sink.flush()
                if on_event is not None:
                    on_event(event)

            original(self, both, on_log, cancel, pause_at)

        progress.Progress.__init__ = recording
        for name in ("estimate_generation", "estimate_perplexity"):
            setattr(estimates, name, _recording_estimate(getattr(estimates, name), sink))
    return mergesmith(arguments)


def _recording_estimate(estimate, sink):
    """`estimate` (a function of guiapp.jobs.estimates) that also writes what it returned, and the seconds this
    process had spent when it did, to `sink`."""
    from guiapp.jobs.durations import process_seconds_so_far  # noqa: PLC0415

    def recording(*args, **kwargs):
        time = estimate(*args, **kwargs)
        if time is not None:
            sink.write(json.dumps({"estimate": time.seconds, "low": time.low, "high": time.high, "basis": time.basis,
                                   "startup": process_seconds_so_far()}) + "\n")
            sink.flush()
        return time

    return recording


def _estimate(name: str, base: Path, tune: Path, command: list[str], startup: float):
    """The estimate the dry run printed, made here by the same functions with the dry run's wall time as start-up."""
    from guiapp.checkpoints.sources import read_headers  # noqa: PLC0415
    from guiapp.hub.references import ModelRef  # noqa: PLC0415
    from guiapp.jobs.estimates import estimate_apply, estimate_extraction, estimate_merge  # noqa: PLC0415
    from guiapp.merging.merge import plan_merge  # noqa: PLC0415
    from guiapp.merging.recipe import load_recipe  # noqa: PLC0415
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
    sys.exit(_child(sys.argv[2:]) if sys.argv[1:2] == ["--child"] else main())
