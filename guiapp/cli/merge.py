"""`mergesmith merge` and `mergesmith demo`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guiapp.cli.options import add_threads_option, seed_value
from guiapp.cli.process import EXIT_OK, EXIT_USAGE
from guiapp.cli.terminal import run_in_terminal
from guiapp.facts.dtypes import dtype_name


def add_merge_commands(commands: argparse._SubParsersAction) -> None:
    merge = commands.add_parser(
        "merge", help="Merge models as a mergekit-compatible YAML recipe says.",
        description="Merge models as a mergekit-compatible YAML recipe says. The recipe format (its keys, every "
        "method with its parameters, gradients, filters, slices, tokenizer options and worked examples) is "
        "described in docs/recipes.md of Mergesmith's source, and in the window under Help › Recipe format.")
    merge.add_argument("recipe", type=Path, help="The recipe (.yml).")
    merge.add_argument("out_dir", type=Path, help="The folder to create for the merged model.")
    merge.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or xpu (default: cpu).")
    merge.add_argument("--out-shard-size", default="5GB", help="Largest output file, e.g. 2GB (default: 5GB).")
    merge.add_argument("--dry-run", action="store_true", help="Validate and print the plan; write nothing.")
    merge.add_argument("--seed", type=seed_value, default=0, help="Seed for the random methods (DARE, DELLA).")
    merge.add_argument("--overwrite", action="store_true", help="Replace OUT_DIR if it exists (once the merge is done).")
    merge.add_argument("--force", action="store_true", help="Start even when the estimate says it will not fit.")
    merge.add_argument("--compute-dtype", choices=("float32", "recipe"), default="float32",
                       help="float32 (default): compute in float32 and round once when storing, the more accurate; "
                       "recipe: compute in the recipe's dtype as mergekit does, to reproduce a published merge.")
    add_threads_option(merge)
    merge.set_defaults(handler=_run_merge)

    demo = commands.add_parser(
        "demo", help="Generate a small base model and two fine-tunes of it, and merge them (no download).",
        description="Generate three small sample models (a base and two fine-tunes of it) and merge the "
        "fine-tunes with TIES, without downloading anything: a whole job in seconds. Running it again reuses "
        "the sample models and replaces the earlier merge.")
    demo.add_argument("--out", type=Path, default=None, help="Where to put the sample models and the merge.")
    demo.set_defaults(handler=_run_demo)




def _run_merge(args: argparse.Namespace) -> int:
    from guiapp.checkpoints.writing import parse_size
    from guiapp.jobs.specs import merge_job
    from guiapp.merging.recipe import load_recipe

    try:
        shard_bytes = parse_size(args.out_shard_size)
    except ValueError as error:
        print(f"mergesmith merge: --out-shard-size: {error}", file=sys.stderr)
        return EXIT_USAGE
    recipe = load_recipe(args.recipe)
    if args.dry_run:
        return _print_plan(recipe, args.out_dir, args.device, args.compute_dtype, args.force)
    return run_in_terminal(merge_job(recipe, args.out_dir, device=args.device, seed=args.seed,
                                     shard_bytes=shard_bytes, overwrite=args.overwrite, force=args.force,
                                     compute_dtype=args.compute_dtype, threads=args.threads), args)


def _print_plan(recipe, out_dir: Path, device: str, compute_dtype: str = "float32", force: bool = False) -> int:
    """`merge --dry-run`: the plan and its estimate, refused as the run would refuse it."""
    from guiapp.jobs.durations import process_seconds_so_far
    from guiapp.jobs.specs import checked_merge_estimate
    from guiapp.merging.merge import plan_merge
    from guiapp.system.units import format_bytes

    plan = plan_merge(recipe, compute_as_recipe=compute_dtype == "recipe")
    # The real run is a new process too: its start-up (Python, torch, planning) counts as this one's did.
    estimate = checked_merge_estimate(plan, device, out_dir, startup_seconds=process_seconds_so_far())
    print(f"Method:        {plan.method.name} ({plan.method.summary})")
    for model in plan.models:
        role = " (base)" if recipe.base_model == model.ref else ""
        print(f"Model:         {model.label}{role}")
    print(f"Tensors:       {len(plan.tasks)}")
    print(f"Output:        {out_dir} ({format_bytes(plan.output_bytes)} as {dtype_name(plan.out_dtype)})")
    print(f"Reads:         {format_bytes(plan.input_bytes)}, computed in {dtype_name(plan.compute_dtype)}")
    for warning in plan.warnings:
        print(f"Warning:       {warning}")
    print("Estimate:      " + estimate.summary().replace("\n", "\n               "))
    if not estimate.fit.fits and not force:
        raise estimate.fit.as_error()  # as the run refuses it
    print("The recipe is valid. Nothing was written (--dry-run).")
    return EXIT_OK


def _run_demo(args: argparse.Namespace) -> int:
    from guiapp.jobs.demo import default_demo_folder, prepare_demo
    from guiapp.jobs.specs import merge_job

    folder = args.out or default_demo_folder()
    print(f"Writing three small sample models (a base and two fine-tunes of it) to {folder} …", file=sys.stderr)
    recipe = prepare_demo(folder)
    output = folder / "merged"
    code = run_in_terminal(merge_job(recipe, output, overwrite=True), args)
    if code == EXIT_OK:
        print(f"The merged sample model is in {output}. Its recipe: {output / 'mergesmith_recipe.yml'}")
    return code
