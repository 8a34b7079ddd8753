"""The merge lab's trials: time and memory, measured in one run.

    PYTHONPATH=. python benchmarks/lab.py [--hidden 768] [--layers 6] [--trials 4]

1. The tiny lab fixture of tests/lab (two fine-tunes of a 32-wide Llama): seconds per trial (goal: under 2 s).
2. A bigger Llama-shaped float32 model (a base and two random fine-tunes, task_arithmetic) and a 2,000-token text:
   a lab trial (in-memory merge + perplexity, from trials.jsonl) against one `merge` to disk plus one `perplexity`
   of its output (each timed inside its own process, imports excluded; goal: a trial within 2x), and the peak
   resident memory of the lab's process against the peaks of the merge's and the perplexity's processes (goal:
   within 1.5x of their sum), and the lab's resident memory after its first and its last trial (flat).
3. The merge step of a trial on that model (the candidate merged into the model in memory, no scoring), with the
   inputs kept whole in memory, kept as the lab does by default (up to half the model's size, so that its peak
   stays within the goal of part 2), and read from disk at every trial; and what keeping them costs.
Each part runs in a fresh process so that its peak (ru_maxrss) is its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_TINY = textwrap.dedent("""
    import json, sys, time, yaml
    from pathlib import Path
    from tests.lab.models import write_planted
    from guiapp.lab.search import LabSettings, run_lab
    folder = Path(sys.argv[1])
    planted = write_planted(folder / "planted")
    recipe = folder / "recipe.yml"
    recipe.write_text(yaml.safe_dump({"merge_method": "task_arithmetic", "base_model": str(planted.base),
        "models": [{"model": str(planted.animals), "parameters": {"weight": 0.5}},
                   {"model": str(planted.computers), "parameters": {"weight": 0.5}}]}))
    started = time.perf_counter()
    run = run_lab(LabSettings(recipe, planted.mixed_text, trials=int(sys.argv[2]), out=folder / "lab"))
    wall = time.perf_counter() - started
    trials = [r.seconds for r in run.records if r.index > 0]
    print(json.dumps({"per_trial": sum(trials) / len(trials), "wall": wall, "trials": len(trials)}))
""")

_MAKE = textwrap.dedent("""
    import sys, torch, yaml, random
    from pathlib import Path
    from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune, write_byte_tokenizer
    folder, hidden, layers = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    shape = LlamaShape(hidden=hidden, intermediate=hidden * 11 // 4, layers=layers, heads=hidden // 64,
                       kv_heads=max(1, hidden // 256), vocab=256)
    base = write_llama(folder / "base", shape, dtype=torch.float32, seed=0)
    for name, seed in (("one", 1), ("two", 2)):
        write_llama_finetune(folder / name, base, seed=seed, delta_scale=0.02)
    for name in ("base", "one", "two"):
        write_byte_tokenizer(folder / name)
    (folder / "recipe.yml").write_text(yaml.safe_dump({"merge_method": "task_arithmetic", "base_model": str(base),
        "dtype": "float32", "models": [{"model": str(folder / "one"), "parameters": {"weight": 0.5}},
                                       {"model": str(folder / "two"), "parameters": {"weight": 0.5}}]}))
    words = "the model merges two models into one and reads the text it writes on the page".split()
    chooser = random.Random(0)
    (folder / "text.txt").write_text(" ".join(chooser.choice(words) for _ in range(400)))
""")

_MERGE = textwrap.dedent("""
    import json, resource, sys, time
    from pathlib import Path
    from guiapp.merging.merge import MergeSettings, run_merge
    from guiapp.merging.recipe import load_recipe
    folder = Path(sys.argv[1])
    started = time.perf_counter()
    run_merge(load_recipe(folder / "recipe.yml"), MergeSettings(output=folder / "merged"))
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")

_PERPLEXITY = textwrap.dedent("""
    import json, resource, sys, time, torch, transformers
    from pathlib import Path
    from guiapp.inference.running import load_model, perplexity, resolve_sources
    folder = Path(sys.argv[1])
    started = time.perf_counter()
    loaded = load_model(resolve_sources([str(folder / "merged")])[0], torch.float32, "cpu")
    loading = time.perf_counter() - started
    value = perplexity(loaded, (folder / "text.txt").read_text()).perplexity
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "loading": loading, "perplexity": value,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")

_LAB = textwrap.dedent("""
    import json, resource, sys, time, psutil
    from pathlib import Path
    from guiapp.lab.search import LabSettings, run_lab
    folder, trials = Path(sys.argv[1]), int(sys.argv[2])
    resident = {}
    def heard(record):
        resident[record.index] = psutil.Process().memory_info().rss / 2**20
    started = time.perf_counter()
    run = run_lab(LabSettings(folder / "recipe.yml", folder / "text.txt", trials=trials, out=folder / "lab"),
                  on_trial=heard)
    wall = time.perf_counter() - started
    seconds = [r.seconds for r in run.records if r.index > 0]
    print(json.dumps({"per_trial": sum(seconds) / len(seconds), "wall": wall, "start": run.start.perplexity,
                      "rss_first_mb": resident[1], "rss_last_mb": resident[max(resident)],
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


_MERGE_STEP = textwrap.dedent("""
    import json, resource, sys, time, yaml
    from pathlib import Path
    from guiapp.lab.trial import Evaluator
    folder, keep = Path(sys.argv[1]), {"all": 1 << 50, "default": None, "none": 0}[sys.argv[2]]
    document = yaml.safe_load((folder / "recipe.yml").read_text())
    evaluator = Evaluator(document, keep_bytes=keep)
    seconds = []
    for weight in (0.5, 0.3, 0.6, 0.4, 0.7, 0.2):
        document["models"][0]["parameters"]["weight"] = weight
        started = time.perf_counter()
        evaluator.load(document)
        seconds.append(time.perf_counter() - started)
    print(json.dumps({"first": seconds[0], "later": sum(seconds[1:]) / len(seconds[1:]),
                      "kept_mb": evaluator._inputs.kept_bytes / 2**20,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


def _run(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--trials", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lab-bench-") as scratch:
        folder = Path(scratch)
        tiny = _run(_TINY, str(folder / "tiny"), "10")
        print(f"tiny fixture: {tiny['per_trial']:.3f} s per trial ({tiny['trials']} trials, whole run "
              f"{tiny['wall']:.1f} s); goal < 2 s: {'met' if tiny['per_trial'] < 2 else 'MISSED'}")
        big = folder / "big"
        big.mkdir()
        _run(_MAKE, str(big), str(args.hidden), str(args.layers))
        size = sum(f.stat().st_size for f in (big / "base").glob("*.safetensors")) / 2**20
        merge = _run(_MERGE, str(big))
        perplexity = _run(_PERPLEXITY, str(big))
        lab = _run(_LAB, str(big), str(args.trials))
        one_pass = merge["seconds"] + perplexity["seconds"]
        print(f"model of {size:.0f} MB (hidden {args.hidden}, {args.layers} layers), 2,000-token text:")
        print(f"  merge {merge['seconds']:.2f} s + perplexity {perplexity['seconds']:.2f} s (of which loading the "
              f"model {perplexity['loading']:.2f} s) = {one_pass:.2f} s; "
              f"lab trial {lab['per_trial']:.2f} s: {lab['per_trial'] / one_pass:.2f}x "
              f"(goal within 2x: {'met' if lab['per_trial'] <= 2 * one_pass else 'MISSED'})")
        print(f"  start perplexity in the lab {lab['start']:.6f}, `perplexity` of the merged model "
              f"{perplexity['perplexity']:.6f}")
        both = merge["peak_mb"] + perplexity["peak_mb"]
        print(f"  peak memory: merge {merge['peak_mb']:.0f} MB, perplexity {perplexity['peak_mb']:.0f} MB, lab "
              f"{lab['peak_mb']:.0f} MB: {lab['peak_mb'] / both:.2f}x their sum (goal within 1.5x: "
              f"{'met' if lab['peak_mb'] <= 1.5 * both else 'MISSED'}), {lab['peak_mb'] / perplexity['peak_mb']:.2f}x "
              "the perplexity's alone")
        print(f"  lab resident after trial 1 {lab['rss_first_mb']:.0f} MB, after the last "
              f"{lab['rss_last_mb']:.0f} MB (flat: {lab['rss_last_mb'] / lab['rss_first_mb']:.2f}x)")
        steps = {keep: _run(_MERGE_STEP, str(big), keep) for keep in ("all", "default", "none")}
        print(f"  a trial's merge step (the first, reading the inputs: {steps['all']['first']:.3f} s), inputs kept "
              f"whole: {steps['all']['later']:.3f} s; kept as the lab does by default (up to half the model's size): "
              f"{steps['default']['later']:.3f} s; read from disk every trial: {steps['none']['later']:.3f} s")
        for keep, words in (("all", "kept whole"), ("default", "by default"), ("none", "read every trial")):
            step = steps[keep]
            print(f"    {words}: holds {step['kept_mb']:.0f} MB ({step['kept_mb'] / size:.2f}x one model's "
                  f"{size:.0f} MB), peak of the merge step {step['peak_mb']:.0f} MB")


if __name__ == "__main__":
    main()
