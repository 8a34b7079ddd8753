"""`mergesmith moe`: assemble fine-tunes of one base into a mixture of experts (mergekit-moe's configuration)."""

from __future__ import annotations

import argparse
from pathlib import Path

from guiapp.cli.options import seed_value
from guiapp.cli.process import EXIT_OK
from guiapp.cli.terminal import run_with_summary


def add_moe_command(commands: argparse._SubParsersAction) -> None:
    moe = commands.add_parser(
        "moe", help="Assemble fine-tunes of one base into a mixture of experts (mergekit-moe's configuration).",
        description="Assemble several fine-tunes of one base model into a Mixtral- or Qwen2-MoE-style mixture of "
        "experts, routed by example prompts, from a mergekit-moe configuration file (read unchanged).")
    moe.add_argument("config", type=Path, help="The mergekit-moe configuration (.yml).")
    moe.add_argument("out", type=Path, help="The folder to create for the MoE model.")
    moe.add_argument("--device", default="cpu", help="Where hidden gates run the base: cpu, cuda, cuda:N, mps or xpu.")
    moe.add_argument("--seed", type=seed_value, default=0, help="Seed for random gates and noise_scale (default: 0).")
    moe.add_argument("--out-shard-size", default="5GB", help="Largest output file, e.g. 2GB (default: 5GB).")
    moe.add_argument("--overwrite", action="store_true", help="Replace OUT if it exists (once the model is done).")
    moe.add_argument("--force", action="store_true", help="Start even when the estimate says it will not fit.")
    moe.add_argument("--dry-run", action="store_true", help="Check the configuration and the models, print the "
                     "plan and estimate; write nothing.")
    moe.add_argument("--json", action="store_true", help="Print the plan (--dry-run) or the summary as JSON.")
    moe.set_defaults(handler=_run_moe)


def _run_moe(args: argparse.Namespace) -> int:
    from guiapp.moe.report import plan_text, summary_text

    if args.dry_run:
        from guiapp.jobs.durations import process_seconds_so_far
        from guiapp.jobs.estimates import estimate_moe
        from guiapp.moe.assemble import plan_moe
        from guiapp.moe.config import load_moe_config
        from guiapp.system.probe import cached_probe

        startup = process_seconds_so_far()  # the real run is a new process too: its start-up counts as this one's
        plan = plan_moe(load_moe_config(args.config)[0], args.device)
        estimate = estimate_moe(plan, args.out, cached_probe(), startup_seconds=startup)
        print(plan_text(plan, args.out, estimate, as_json=args.json))
        return EXIT_OK
    from guiapp.jobs.specs import moe_job

    job = moe_job(args.config, args.out, device=args.device, seed=args.seed, overwrite=args.overwrite,
                  max_shard_size=args.out_shard_size, force=args.force)
    summary, code = run_with_summary(job, args)
    if code == EXIT_OK:
        print(summary_text(summary, as_json=args.json))
    return code
