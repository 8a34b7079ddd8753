"""Merging at real model sizes: a Mistral-7B-shaped base and two fine-tunes (bf16, 5 GB shards like the Hub's).

    python benchmarks/real_sizes.py [--cache ~/.cache/mergesmith-bench] [--methods linear,ties]

The models are generated once into the cache folder (outside the repository) and reused; free disk is checked
first and the benchmark stops with a clear line when there is not enough. Each run starts cold: the page cache is
dropped (as root) or the input files' pages are evicted (see workload.drop_page_cache). For each method it prints
the wall time against the cold floor (reading every input byte once, plus writing the output's bytes), the peak
private (anonymous) memory of the merge process against the same merge of the 1 GB models (flat: the same), and
the estimate of guiapp/jobs/estimates.py against the measured peak.

Goals: linear ≤ 1.3× the floor, ties ≤ 4×, peak private memory flat between 1 GB and 7 B, estimate within ±25 %.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from merge import _OURS, models_in, recipe_text, run_measured  # noqa: E402
from workload import drop_page_cache, load_average  # noqa: E402

from guiapp.checkpoints.samples import LlamaShape, llama_config  # noqa: E402

MISTRAL_7B = LlamaShape(hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8, vocab=32000)
SHARD_BYTES = 5_000_000_000
GOALS = {"linear": 1.3, "ties": 4.0}
_CHUNK = 64 << 20


def tensor_shapes(shape: LlamaShape) -> dict[str, tuple[int, ...]]:
    """The names and shapes of a LlamaForCausalLM's weights (as guiapp.checkpoints.samples.llama_tensors makes them)."""
    kv = shape.kv_heads * shape.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (shape.vocab, shape.hidden)}
    for i in range(shape.layers):
        prefix = f"model.layers.{i}."
        shapes.update({
            prefix + "self_attn.q_proj.weight": (shape.hidden, shape.hidden),
            prefix + "self_attn.k_proj.weight": (kv, shape.hidden),
            prefix + "self_attn.v_proj.weight": (kv, shape.hidden),
            prefix + "self_attn.o_proj.weight": (shape.hidden, shape.hidden),
            prefix + "mlp.gate_proj.weight": (shape.intermediate, shape.hidden),
            prefix + "mlp.up_proj.weight": (shape.intermediate, shape.hidden),
            prefix + "mlp.down_proj.weight": (shape.hidden, shape.intermediate),
            prefix + "input_layernorm.weight": (shape.hidden,),
            prefix + "post_attention_layernorm.weight": (shape.hidden,),
        })
    shapes["model.norm.weight"] = (shape.hidden,)
    shapes["lm_head.weight"] = (shape.vocab, shape.hidden)
    return shapes


def model_bytes(shape: LlamaShape) -> int:
    return sum(2 * _numel(s) for s in tensor_shapes(shape).values())


def _numel(dims: tuple[int, ...]) -> int:
    count = 1
    for d in dims:
        count *= d
    return count


def generate(folder: Path, shape: LlamaShape, fine_tune_seed: int | None) -> Path:
    """Write a bf16 model (the base, or a fine-tune of it when `fine_tune_seed`) in 5 GB shards.

    Random numbers are drawn once into a pool and each tensor is a slice of it at an offset of its own (drawing
    seven billion numbers would take longer than the benchmark): the merge's work does not depend on them.
    A fine-tune adds a second pool's slice at 5 % of the base's scale.
    """
    import torch
    from safetensors.torch import save_file

    if (folder / "complete").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    pool = (torch.randn(1 << 27, generator=torch.Generator().manual_seed(0)) * 0.02).to(torch.bfloat16)
    noise = (torch.randn(1 << 27, generator=torch.Generator().manual_seed(fine_tune_seed)) * 0.001
             if fine_tune_seed is not None else None)

    def tensor(name: str, dims: tuple[int, ...]) -> torch.Tensor:
        if len(dims) == 1:
            values = torch.ones(dims, dtype=torch.float32)
        else:
            n = _numel(dims)
            start = zlib.crc32(name.encode()) % (pool.numel() - n)
            values = pool[start:start + n].float()
        if noise is not None:
            n = values.numel()
            start = zlib.crc32(name.encode() + b"noise") % (noise.numel() - n)
            values = values.reshape(-1) + noise[start:start + n]
        return values.reshape(dims).to(torch.bfloat16)

    shapes = tensor_shapes(shape)
    groups: list[list[str]] = [[]]
    size = 0
    for name, dims in shapes.items():
        nbytes = 2 * _numel(dims)
        if groups[-1] and size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    weight_map = {}
    for index, names in enumerate(groups):
        filename = f"model-{index + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({name: tensor(name, shapes[name]) for name in names}, folder / filename, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(names, filename))
        print(f"    {folder.name}/{filename}", flush=True)
    index_doc = {"metadata": {"total_size": model_bytes(shape)}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2))
    config = llama_config(shape, torch.bfloat16)
    config.update({"architectures": ["MistralForCausalLM"], "model_type": "mistral"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "complete").write_text("")
    return folder


def floor_seconds(inputs: list[Path], output_bytes: int, scratch: Path) -> tuple[float, float]:
    """(seconds to read every input byte once, seconds to write `output_bytes`), in large sequential chunks."""
    buffer = bytearray(_CHUNK)
    start = time.perf_counter()
    for folder in inputs:
        for file in sorted(folder.glob("*.safetensors")):
            with file.open("rb", buffering=0) as stream:
                while stream.readinto(buffer):
                    pass
    read = time.perf_counter() - start
    start = time.perf_counter()
    with scratch.open("wb", buffering=0) as stream:
        for _ in range(output_bytes // _CHUNK):
            stream.write(buffer)
    written = time.perf_counter() - start
    scratch.unlink()
    return read, written


_ESTIMATE = """
import sys
from pathlib import Path
from guiapp.merging.merge import plan_merge
from guiapp.merging.recipe import load_recipe
from guiapp.jobs.estimates import estimate_merge
print(estimate_merge(plan_merge(load_recipe(Path(sys.argv[1]))), "cpu", Path(sys.argv[2])).peak_ram)
"""


def estimated_peak(recipe: Path, out: Path) -> int:
    """The memory estimate a new process makes, as `merge --dry-run` does: made in this one, it would count what
    this benchmark holds (the 1 GB models it may have just built) as the merge's own baseline."""
    result = subprocess.run([sys.executable, "-c", _ESTIMATE, str(recipe), str(out)], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parents[1])
    return int(result.stdout.split()[-1])


def peak_at_1gb(cache: Path, methods: list[str]) -> dict[str, int]:
    """Peak private memory of each method's merge of the 1 GB models (warm cache: memory does not depend on it)."""
    folder = cache / "llama-1GB"
    base, one, two = models_in(folder, 1.0)
    peaks = {}
    for method in methods:
        recipe = folder / f"{method}.yml"
        recipe.write_text(recipe_text(method, base, one, two))
        shutil.rmtree(folder / "out", ignore_errors=True)
        peaks[method] = run_measured([sys.executable, "-c", _OURS, str(recipe), str(folder / "out")])[1]
        shutil.rmtree(folder / "out", ignore_errors=True)
    return peaks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "mergesmith-bench")
    parser.add_argument("--methods", default="linear,ties")
    args = parser.parse_args()
    methods = args.methods.split(",")
    cache = args.cache
    cache.mkdir(parents=True, exist_ok=True)
    folder = cache / "mistral-7b-shape"
    one_model = model_bytes(MISTRAL_7B)
    missing = sum(one_model for name in ("base", "one", "two") if not (folder / name / "complete").exists())
    needed = missing + one_model + 2_000_000_000  # the models still to generate, one output, a margin
    free = shutil.disk_usage(cache).free
    print(f"Mistral-7B shape: {one_model / 1e9:.1f} GB per model in bf16; {free / 1e9:.0f} GB free in {cache}, "
          f"{needed / 1e9:.0f} GB needed ({load_average()})", flush=True)
    if free < needed:
        print(f"SKIPPED: not enough free disk for three 7B models and an output ({needed / 1e9:.0f} GB needed, "
              f"{free / 1e9:.0f} GB free). Free some space or pass --cache on a larger drive.")
        return 0
    started = time.perf_counter()
    models = {"base": generate(folder / "base", MISTRAL_7B, None),
              "one": generate(folder / "one", MISTRAL_7B, 1),
              "two": generate(folder / "two", MISTRAL_7B, 2)}
    print(f"  models ready in {time.perf_counter() - started:.0f} s", flush=True)
    small_peaks = peak_at_1gb(cache, methods)
    rows = []
    for method in methods:
        recipe = folder / f"{method}.yml"
        recipe.write_text(recipe_text(method, **models))
        inputs = [models["one"], models["two"]] if method == "linear" else list(models.values())
        files = [f for model in inputs for f in model.glob("*.safetensors")]
        out = folder / "out"
        shutil.rmtree(out, ignore_errors=True)
        cold = drop_page_cache(files)
        read_s, write_s = floor_seconds(inputs, one_model, folder / "floor.bin")
        drop_page_cache(files)
        seconds, peak, _ = run_measured([sys.executable, "-c", _OURS, str(recipe), str(out)])
        estimate = estimated_peak(recipe, folder / "estimate-out")
        shutil.rmtree(out, ignore_errors=True)
        floor = read_s + write_s
        row = {"method": method, "seconds": round(seconds, 1), "floor_read_s": round(read_s, 1),
               "floor_write_s": round(write_s, 1), "ratio": round(seconds / floor, 2), "goal": GOALS.get(method),
               "peak_mb": round(peak / 1e6), "peak_1gb_mb": round(small_peaks[method] / 1e6),
               "estimate_mb": round(estimate / 1e6), "estimate_error": round(estimate / peak - 1, 3),
               "cold": cold, "load": load_average()}
        rows.append(row)
        print(f"  {method}: {row} ", flush=True)
    print("\n| method (Mistral-7B shape, bf16, cold) | merge | floor (read + write) | ratio (goal) | peak private "
          "7B / 1 GB | estimate (error) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        verdict = "ok" if r["goal"] is None or r["ratio"] <= r["goal"] else "MISSED"
        print(f"| {r['method']} | {r['seconds']:.0f} s | {r['floor_read_s'] + r['floor_write_s']:.0f} s "
              f"({r['floor_read_s']:.0f} + {r['floor_write_s']:.0f}) | {r['ratio']:.2f}× (≤ {r['goal']}) {verdict} | "
              f"{r['peak_mb']} MB / {r['peak_1gb_mb']} MB | {r['estimate_mb']} MB ({r['estimate_error']:+.0%}) |")
    print(f"({rows[0]['cold'] if rows else ''}; {load_average()})")
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
