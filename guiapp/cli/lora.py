"""`mergesmith extract-lora` and `mergesmith apply-lora`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from guiapp.cli.options import add_threads_option, count_of, finite_number
from guiapp.cli.process import EXIT_OK
from guiapp.cli.terminal import run_with_summary
from guiapp.facts.choices import EMBEDDING_POLICIES, SOLVERS
from guiapp.facts.dtypes import COMPUTE


def add_lora_commands(commands: argparse._SubParsersAction) -> None:
    extract = commands.add_parser(
        "extract-lora", help="Extract a PEFT LoRA adapter from a fine-tuned model and its base."
    )
    extract.add_argument("--base", required=True, help="The base model: a folder or a Hub id.")
    extract.add_argument("--model", required=True, help="The fine-tuned model: a folder or a Hub id.")
    extract.add_argument("--out", required=True, type=Path, help="The adapter folder to create.")
    rank = extract.add_mutually_exclusive_group()
    rank.add_argument("--rank", type=int, help="The same rank for every module (default: 32).")
    rank.add_argument("--energy", type=float, help="Per module, the smallest rank keeping this fraction of the "
                      "update's energy, e.g. 0.9.")
    rank.add_argument("--threshold", type=float, help="Per module, keep directions at least this fraction as "
                      "strong as the strongest, e.g. 0.05.")
    extract.add_argument("--max-rank", type=int, default=None, help="Never give a module a higher rank than this.")
    extract.add_argument("--solver", choices=SOLVERS, default="randomized",
                         help="randomized: fast, within 2 %% of the optimum (default); exact: full SVD.")
    extract.add_argument("--include", default=None, help="Only modules whose name matches this regular expression.")
    extract.add_argument("--exclude", default=None, help="Leave out modules whose name matches this regular expression.")
    extract.add_argument("--embeddings", choices=EMBEDDING_POLICIES, default="save",
                         help="Changed embeddings and output head: save whole (default), decompose, or skip.")
    extract.add_argument("--dtype", default=None, help="Adapter storage dtype (default: the fine-tune's).")
    extract.add_argument("--compute-dtype", choices=COMPUTE, default="float32",
                         help="Precision of the decomposition (default: float32).")
    extract.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or xpu (default: cpu).")
    extract.add_argument("--overwrite", action="store_true", help="Replace OUT if it exists (once the adapter is done).")
    extract.add_argument("--force", action="store_true", help="Start even when the estimate says it will not fit.")
    extract.add_argument("--dry-run", action="store_true", help="Check the inputs and print the plan and estimate; "
                         "write nothing.")
    add_threads_option(extract)
    extract.set_defaults(handler=_run_extract_lora)

    apply = commands.add_parser("apply-lora", help="Apply a PEFT LoRA adapter to its base model: a full model folder.")
    apply.add_argument("--base", required=True, help="The base model: a folder or a Hub id.")
    apply.add_argument("--adapter", required=True, help="The adapter: a folder or a Hub id.")
    apply.add_argument("--out", required=True, type=Path, help="The model folder to create.")
    apply.add_argument("--scale", type=finite_number, default=1.0,
                       help="Multiply the adapter's effect (default: 1).")
    apply.add_argument("--dtype", default=None, help="Output dtype (default: each tensor keeps the base's).")
    apply.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or xpu (default: cpu).")
    apply.add_argument("--out-shard-size", default="5GB", help="Largest output file, e.g. 2GB (default: 5GB).")
    apply.add_argument("--overwrite", action="store_true", help="Replace OUT if it exists (once the model is done).")
    apply.add_argument("--force", action="store_true", help="Start even when the estimate says it will not fit.")
    apply.add_argument("--dry-run", action="store_true", help="Check the inputs and print the plan and estimate; "
                       "write nothing.")
    add_threads_option(apply)
    apply.set_defaults(handler=_run_apply_lora)


def _run_extract_lora(args: argparse.Namespace) -> int:
    from guiapp.jobs.specs import extract_job  # torch loads with the job

    if args.energy is not None:
        rank_mode, rank_value = "energy", args.energy
    elif args.threshold is not None:
        rank_mode, rank_value = "threshold", args.threshold
    else:
        rank_mode, rank_value = "fixed", args.rank if args.rank is not None else 32
    if args.dry_run:
        return _print_lora_plan(args, rank=int(rank_value) if rank_mode == "fixed" else (args.max_rank or 32),
                                rule=(rank_mode, rank_value))
    job = extract_job(
        args.base, args.model, args.out, rank_mode=rank_mode, rank_value=rank_value, max_rank=args.max_rank,
        solver=args.solver, include=args.include, exclude=args.exclude, embeddings=args.embeddings,
        dtype=args.dtype, device=args.device, compute_dtype=args.compute_dtype, overwrite=args.overwrite,
        force=args.force, threads=args.threads,
    )
    summary, code = run_with_summary(job, args)
    if code == EXIT_OK:
        _print_extraction_summary(summary)
    return code


def _run_apply_lora(args: argparse.Namespace) -> int:
    from guiapp.jobs.specs import apply_job  # torch loads with the job

    if args.dry_run:
        return _print_lora_plan(args)
    job = apply_job(args.base, args.adapter, args.out, scale=args.scale, dtype=args.dtype, device=args.device,
                    overwrite=args.overwrite, max_shard_size=args.out_shard_size, force=args.force,
                    threads=args.threads)
    summary, code = run_with_summary(job, args)
    if code == EXIT_OK:
        from guiapp.system.units import format_bytes

        print(f"Model:   {summary['output']} ({format_bytes(summary['bytes'])}, {summary['tensors']} tensors: "
              f"{summary['changed']} changed by the adapter, {summary['replaced']} replaced)")
    return code


def _print_lora_plan(args: argparse.Namespace, rank: int | None = None, rule: tuple[str, float] | None = None) -> int:
    """`extract-lora --dry-run` (given `rank` and the `rule`'s mode and value) or `apply-lora --dry-run`: the
    inputs' headers are read, the plan and the estimate printed as `merge --dry-run` prints them; nothing is
    written."""
    from guiapp.checkpoints.sources import read_headers
    from guiapp.hub.references import ModelRef
    from guiapp.jobs.durations import process_seconds_so_far
    from guiapp.jobs.estimates import estimate_apply, estimate_extraction
    from guiapp.system.probe import cached_probe
    from guiapp.system.units import format_bytes

    base = read_headers(ModelRef.parse(args.base))
    startup = process_seconds_so_far()  # the real run is a new process too: its start-up counts as this one's
    print(f"Base:          {args.base}")
    if rank is not None:
        model = read_headers(ModelRef.parse(args.model))
        from guiapp.lora.lowrank import RankRule

        estimate = estimate_extraction(base, model, args.device, args.out, cached_probe(), rank=rank,
                                       solver=args.solver, embeddings=args.embeddings, startup_seconds=startup,
                                       rule=RankRule(*rule, args.max_rank) if rule else None)
        reads = sum(i.nbytes for i in model.tensors.values()) + sum(i.nbytes for i in base.tensors.values())
        print(f"Fine-tune:     {args.model}")
        print(f"Rank:          {rank} ({args.solver} solver)")
    else:
        estimate = estimate_apply(base, args.device, args.out, cached_probe(), startup_seconds=startup)
        reads = sum(i.nbytes for i in base.tensors.values())
        print(f"Adapter:       {args.adapter}")
    print(f"Output:        {args.out} (up to {format_bytes(estimate.output_bytes)})")
    print(f"Reads:         {format_bytes(reads)}")
    print("Estimate:      " + estimate.summary().replace("\n", "\n               "))
    print("Nothing was written (--dry-run).")
    return EXIT_OK


def _print_extraction_summary(summary: dict) -> None:
    energy = summary["mean_retained_energy"]
    print(f"Adapter: {summary['output']} ({summary['adapter_bytes'] / 1e6:.1f} MB)")
    print(f"Modules: {summary['lora_modules']} as LoRA, {summary['saved_modules']} saved whole, "
          f"{summary['unchanged_modules']} unchanged (skipped)")
    if energy is not None:
        print(f"Mean retained energy: {energy:.4f}")
    if summary["worst_modules"]:
        print("Worst modules (least of their change kept; relative error):")
        for worst in summary["worst_modules"]:
            print(f"  {worst['module']:<48} rank {worst['rank']:<4} kept {worst['retained_energy']:.4f}  "
                  f"error {worst['relative_error']:.4f}")
    print("Per-module details: extraction_report.json in the adapter folder.")


def add_lora_toolbox_commands(commands: argparse._SubParsersAction) -> None:
    resize = commands.add_parser("lora-resize", help="Make a LoRA adapter smaller: each module's best lower-rank "
                                 "approximation.")
    resize.add_argument("adapter", help="The adapter: a folder or a Hub id.")
    resize.add_argument("--out", required=True, type=Path, help="The adapter folder to create.")
    size = resize.add_mutually_exclusive_group(required=True)
    size.add_argument("--rank", type=count_of("rank"), help="Keep at most this rank in every module.")
    size.add_argument("--energy", type=finite_number, help="Keep in each module the smallest rank that holds "
                      "this fraction of its update's energy (e.g. 0.9).")
    merge = commands.add_parser("lora-merge", help="Combine LoRA adapters into one, as PEFT's add_weighted_adapter.")
    merge.add_argument("adapters", nargs="+", help="The adapters: folders or Hub ids.")
    merge.add_argument("--weights", nargs="+", type=finite_number, required=True, help="One weight per adapter.")
    merge.add_argument("--method", choices=("linear", "cat", "svd", "ties"), required=True,
                       help="linear and ties: equal ranks, factors combined; cat: exact, ranks add up; svd: exact "
                       "SVD of the summed update at --rank.")
    merge.add_argument("--rank", type=count_of("rank"), help="svd only: the result's rank (default: the largest).")
    merge.add_argument("--density", type=finite_number, help="ties only: the fraction of entries kept (0 to 1).")
    merge.add_argument("--out", required=True, type=Path, help="The adapter folder to create.")
    for command in (resize, merge):
        command.add_argument("--overwrite", action="store_true", help="Replace OUT if it is an earlier output.")
        command.add_argument("--json", action="store_true", help="Print the report as JSON.")
    resize.set_defaults(handler=_run_lora_resize)
    merge.set_defaults(handler=_run_lora_merge)


def _run_lora_resize(args: argparse.Namespace) -> int:
    from guiapp.jobs.specs import resize_job
    from guiapp.lora.resize import report_lines

    job = resize_job(args.adapter, args.out, rank=args.rank, energy=args.energy, overwrite=args.overwrite)
    return _print_adapter_report(*run_with_summary(job, args), args.json, report_lines)


def _run_lora_merge(args: argparse.Namespace) -> int:
    from guiapp.jobs.specs import combine_job
    from guiapp.lora.combine import report_lines

    job = combine_job(args.adapters, args.weights, args.method, args.out, rank=args.rank, density=args.density,
                      overwrite=args.overwrite)
    return _print_adapter_report(*run_with_summary(job, args), args.json, report_lines)


def _print_adapter_report(summary: dict, code: int, as_json: bool, lines: Callable[[dict], list[str]]) -> int:
    if code == EXIT_OK:
        import json

        print(json.dumps(summary) if as_json else "\n".join([f"Adapter: {summary['output']}", *lines(summary)]))
    return code
