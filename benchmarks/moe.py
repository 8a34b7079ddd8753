"""MoE assembly speed against the disk floor, and what hidden gates add, measured in one run.

    python benchmarks/moe.py [--hidden 1024] [--layers 8] [--repeat 2] [--mergekit]

Builds a Llama-shaped bf16 base and three fine-tunes of it, then for cheap_embed and random gates prints the wall
time of `assemble_moe` (three routed experts, Mixtral layout) and its ratio to the floor: reading every tensor
the assembly reads (the base's attention, embeddings and norms, each expert's MLP) and writing the output's bytes
with safetensors alone, on the same files in the same run. Floor and assembly alternate --repeat times; the
fastest of each counts (shared machines are noisy). For hidden gates it prints the gates' own time (loading the
base and running it over every prompt set) beside the copying's. With --mergekit, the same configurations run
through mergekit-moe (its own process) for comparison.

Target: cheap_embed and random within 2× the floor (the merge benchmark's budget for linear); hidden gates cost
one load of the base plus a forward pass per prompt set, stated, not targeted.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from guiapp.checkpoints.samples import LlamaShape, write_byte_tokenizer, write_llama, write_llama_finetune  # noqa: E402
from guiapp.moe.assemble import MoeSettings, assemble_moe, plan_moe  # noqa: E402
from guiapp.moe.config import moe_config_from_dict  # noqa: E402
from guiapp.moe.gates import hidden_gates  # noqa: E402
from guiapp.progress import Progress  # noqa: E402

PROMPTS = [["add two numbers and sum the equation"], ["write a poem about the sea"], ["fix the bug in this code"]]


def build_models(folder: Path, shape: LlamaShape) -> dict[str, Path]:
    base = write_llama(folder / "base", shape, dtype=torch.bfloat16)
    write_byte_tokenizer(base, shape.vocab)
    models = {"base": base}
    for index in range(3):
        tuned = write_llama_finetune(folder / f"e{index}", base, seed=index + 1)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(base / name, tuned / name)
        models[f"e{index}"] = tuned
    return models


def document(models: dict[str, Path], gate_mode: str) -> dict:
    return {"base_model": str(models["base"]), "gate_mode": gate_mode,
            "experts": [{"source_model": str(models[f"e{i}"]), "positive_prompts": PROMPTS[i]} for i in range(3)]}


def floor_seconds(plan, output_bytes: int, out: Path) -> float:
    """Read every tensor the plan reads (copied out of the memory map) and write the output's bytes."""
    start = time.perf_counter()
    read = []
    for tensor in plan.tensors:
        for part in tensor.parts:
            if part.model is None:
                continue
            folder = part.model.existing_folder()
            with safe_open(folder / "model.safetensors", framework="pt") as handle:
                read += [handle.get_tensor(name).clone() for name in part.names]
    blob = torch.empty(output_bytes, dtype=torch.uint8)
    save_file({"blob": blob}, out)
    seconds = time.perf_counter() - start
    out.unlink()
    del read
    return seconds


def assembly_seconds(config, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    assemble_moe(MoeSettings(config, out))
    seconds = time.perf_counter() - start
    shutil.rmtree(out)
    return seconds


def mergekit_seconds(doc: dict, folder: Path) -> float | None:
    tool = Path(sys.executable).parent / "mergekit-moe"
    if not tool.exists():
        return None
    path = folder / "mk.yml"
    path.write_text(yaml.safe_dump(doc))
    out = folder / "mk-out"
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run([str(tool), str(path), str(out), "--device", "cpu"], check=True, capture_output=True)
    seconds = time.perf_counter() - start
    shutil.rmtree(out)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--mergekit", action="store_true", help="also time mergekit-moe on the same configurations")
    args = parser.parse_args()
    shape = LlamaShape(hidden=args.hidden, intermediate=args.hidden * 11 // 4, layers=args.layers, heads=8,
                       kv_heads=4, vocab=32000)
    with tempfile.TemporaryDirectory(prefix="moe-bench-") as tmp:
        folder = Path(tmp)
        models = build_models(folder, shape)
        model_bytes = sum(p.stat().st_size for p in models["base"].glob("*.safetensors"))
        print(f"Base and three fine-tunes of {model_bytes / 1e6:.0f} MB each (bf16, hidden {args.hidden}, "
              f"{args.layers} layers); three routed experts, Mixtral layout.")
        for mode in ("cheap_embed", "random"):
            config = moe_config_from_dict(document(models, mode))
            plan = plan_moe(config)
            floors, ours = [], []
            for _ in range(args.repeat):
                floors.append(floor_seconds(plan, plan.output_bytes, folder / "floor.safetensors"))
                ours.append(assembly_seconds(config, folder / "out"))
            floor, best = min(floors), min(ours)
            verdict = "ok" if best <= 2 * floor else "MISSED"
            line = (f"  {mode:<12} {best:6.2f} s  floor {floor:6.2f} s  ratio {best / floor:4.2f} (≤ 2) {verdict}; "
                    f"reads {plan.input_bytes / 1e6:.0f} MB, writes {plan.output_bytes / 1e6:.0f} MB")
            if args.mergekit:
                theirs = mergekit_seconds(document(models, mode), folder)
                if theirs is not None:
                    line += f"; mergekit-moe {theirs:.2f} s (process included)"
            print(line)
        config = moe_config_from_dict(document(models, "hidden"))
        plan = plan_moe(config)
        start = time.perf_counter()
        hidden_gates(config.experts, str(config.base_model), plan.gate_dtype, "cpu", Progress())
        gates = time.perf_counter() - start
        total = assembly_seconds(config, folder / "out")
        print(f"  hidden       {total:6.2f} s in all, of which the gates (loading the base in "
              f"{str(plan.gate_dtype).removeprefix('torch.')} and {plan.gate_prompt_sets} forward passes) "
              f"{gates:.2f} s measured alone")


if __name__ == "__main__":
    main()
