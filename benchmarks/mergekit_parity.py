"""Do our merges give mergekit's tensors? Runs the deterministic methods through both on small generated models.

    python benchmarks/mergekit_parity.py --mergekit /path/to/mergekit-yaml
        [--inputs bfloat16 --dtype bfloat16 --out-dtype "" --compute-dtype recipe]

With `dtype: float32` and `out_dtype: bfloat16` (docs/spec/merge-methods.md: the two then agree to the last bit in
nearly
every element) it prints, per method, the fraction of output elements that are bit-identical and the largest
difference relative to the tensor's largest value. Random methods (DARE, DELLA) are left out: they agree only in
distribution.

The options set the generated models' storage dtype, the recipes' `dtype` and `out_dtype` (empty: left out) and
Mergesmith's `--compute-dtype`: a published bf16 merge is `--inputs bfloat16 --dtype bfloat16 --out-dtype ""`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.recipe import parse_recipe

TWO = "  - model: {one}\n    parameters: {{weight: 0.6{extra}}}\n  - model: {two}\n    parameters: {{weight: 0.4{extra}}}\n"
RECIPES = {
    "linear": "merge_method: linear\nmodels:\n" + TWO,
    "task_arithmetic": "merge_method: task_arithmetic\nbase_model: {base}\nmodels:\n" + TWO,
    "ties": "merge_method: ties\nbase_model: {base}\nmodels:\n" + TWO.replace("{extra}", ", density: 0.5"),
    "breadcrumbs_ties": "merge_method: breadcrumbs_ties\nbase_model: {base}\nmodels:\n"
                        + TWO.replace("{extra}", ", density: 0.8, gamma: 0.05"),
    "slerp": "merge_method: slerp\nbase_model: {base}\nmodels:\n  - model: {base}\n  - model: {one}\nparameters: {{t: 0.3}}\n",
    "nuslerp": "merge_method: nuslerp\nbase_model: {base}\nmodels:\n" + TWO,
    "multislerp": "merge_method: multislerp\nbase_model: {base}\nmodels:\n" + TWO,
    "karcher": "merge_method: karcher\nmodels:\n" + TWO,
    "model_stock": "merge_method: model_stock\nbase_model: {base}\nmodels:\n" + TWO,
    "sce": "merge_method: sce\nbase_model: {base}\nmodels:\n" + TWO + "parameters: {{select_topk: 0.5}}\n",
    "breadcrumbs": "merge_method: breadcrumbs\nbase_model: {base}\nmodels:\n"
                   + TWO.replace("{extra}", ", density: 0.8, gamma: 0.05"),
    "ram": "merge_method: ram\nbase_model: {base}\nmodels:\n" + TWO,
    "ramplus_tl": "merge_method: ramplus_tl\nbase_model: {base}\nmodels:\n" + TWO,
    "arcee_fusion": "merge_method: arcee_fusion\nbase_model: {base}\nmodels:\n  - model: {one}\n",
    "passthrough": "merge_method: passthrough\nslices:\n  - sources:\n      - model: {one}\n        layer_range: [0, 2]\n"
                   "  - sources:\n      - model: {two}\n        layer_range: [1, 2]\n",
    "nearswap": "merge_method: nearswap\nbase_model: {base}\nmodels:\n  - model: {one}\nparameters: {{t: 0.001}}\n",
}


def compare(ours: Path, theirs: Path) -> tuple[float, float]:
    a = {k: v for f in ours.glob("*.safetensors") for k, v in load_file(f).items()}
    b = {k: v for f in theirs.glob("*.safetensors") for k, v in load_file(f).items()}
    same = total = 0
    worst = 0.0
    for name, tensor in b.items():
        mine = a[name]
        same += int((mine.view(torch.int16) == tensor.to(mine.dtype).view(torch.int16)).sum())
        total += tensor.numel()
        scale = float(tensor.float().abs().max()) or 1.0
        worst = max(worst, float((mine.float() - tensor.float()).abs().max()) / scale)
    return same / total, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mergekit", default=shutil.which("mergekit-yaml"), help="path of mergekit-yaml")
    parser.add_argument("--inputs", default="float32", help="storage dtype of the generated models")
    parser.add_argument("--dtype", default="float32", help="the recipes' `dtype`")
    parser.add_argument("--out-dtype", default="bfloat16", help="the recipes' `out_dtype` (empty: none)")
    parser.add_argument("--compute-dtype", default="float32", choices=("float32", "recipe"))
    args = parser.parse_args()
    if not args.mergekit:
        raise SystemExit("mergekit-yaml not found: install mergekit (in any environment) and pass --mergekit")
    work = Path(tempfile.mkdtemp(prefix="mergesmith-parity-"))
    shape = LlamaShape(hidden=256, intermediate=512, layers=2, vocab=512)
    stored = getattr(torch, args.inputs)
    base = write_llama(work / "base", shape, dtype=stored)
    one = write_llama_finetune(work / "one", base, seed=1, delta_rank=None, delta_scale=0.01, dtype=stored)
    two = write_llama_finetune(work / "two", base, seed=2, delta_rank=None, delta_scale=0.01, dtype=stored)
    suffix = f"dtype: {args.dtype}\n" + (f"out_dtype: {args.out_dtype}\n" if args.out_dtype else "")
    for method, template in RECIPES.items():
        text = template.format(base=base, one=one, two=two, extra="") + suffix
        (work / f"{method}.yml").write_text(text)
        run_merge(parse_recipe(text), MergeSettings(work / f"ours-{method}", compute_dtype=args.compute_dtype))
        subprocess.run([args.mergekit, str(work / f"{method}.yml"), str(work / f"theirs-{method}")],
                       check=True, capture_output=True)
        identical, worst = compare(work / f"ours-{method}", work / f"theirs-{method}")
        print(f"{method:18s} bit-identical {identical:8.4%}   largest difference {worst:.2e}", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
