"""`mergesmith lab`: search a recipe's numbers for the merge with the lowest perplexity on the user's text."""

from __future__ import annotations

import argparse
from pathlib import Path

from guiapp.cli.options import seed_value
from guiapp.cli.process import EXIT_OK
from guiapp.cli.terminal import run_with_summary


def add_lab_command(commands: argparse._SubParsersAction) -> None:
    lab_help = "Search a recipe's numbers for the merge with the lowest perplexity on your text."
    lab = commands.add_parser("lab", help=lab_help, description=lab_help + " Writes OUT/best.yml (a recipe for "
                              "`mergesmith merge`) and OUT/trials.jsonl; run again with the same OUT to continue.")
    lab.add_argument("recipe", type=Path, help="The recipe to start from (.yml).")
    lab.add_argument("--text", required=True, type=Path, help="A .txt file, or .jsonl with a \"text\" field.")
    lab.add_argument("--trials", required=True, type=int, help="How many candidates to try after the recipe as given.")
    lab.add_argument("--out", required=True, type=Path, help="The folder for the trials and best.yml.")
    lab.add_argument("--prompts", type=Path, default=None, help="A .jsonl file of {\"prompt\", \"answer\"} pairs: the "
                     "search also lowers the perplexity of each answer after its prompt.")
    lab.add_argument("--seed", type=seed_value, default=0, help="Seed of the search (default: 0).")
    lab.add_argument("--tune", default=None, help="Comma-separated numbers to tune (default: all), e.g. "
                     "`weight,t=0.2:0.8` or `models[0].weight`.")
    lab.add_argument("--holdout", type=float, default=0.0, help="Keep this share of the text's end aside and report "
                     "the perplexity on it too, e.g. 0.2.")
    lab.add_argument("--window", type=int, default=512, help="Tokens per window (default: 512).")
    lab.add_argument("--engine", choices=("local", "ray"), default="local", help="Run trials here, or on Ray.")
    lab.add_argument("--ray-address", default=None, help="HOST:PORT of an existing Ray cluster (default: start one).")
    lab.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or xpu (default: cpu).")
    lab.add_argument("--json", action="store_true", help="Print the result as one JSON object.")
    lab.set_defaults(handler=_run_lab)


def _run_lab(args: argparse.Namespace) -> int:
    import json

    from guiapp.jobs.lab import LabSpec

    spec = LabSpec(str(args.recipe), str(args.text), args.trials, str(args.out), args.seed, args.engine,
                   args.ray_address, args.holdout, args.tune, args.window, args.device,
                   str(args.prompts) if args.prompts else None)
    summary, code = run_with_summary(spec.job(), args)
    if code == EXIT_OK and args.json:
        print(json.dumps(summary))
    elif code == EXIT_OK:
        print(f"Best perplexity {summary['best_perplexity']:.4f} (trial {summary['best_trial']} of {summary['trials']}"
              f"); the recipe as given: {summary['start_perplexity']:.4f}.")
        print("Best values: " + ", ".join(f"{name} {value:g}" for name, value in summary["best_values"].items()))
        if "held_out_best_perplexity" in summary:
            print(f"On the held-out text: best {summary['held_out_best_perplexity']:.4f}, the recipe as given "
                  f"{summary['held_out_start_perplexity']:.4f}.")
        if summary["failed_trials"]:
            print(f"{summary['failed_trials']} trials failed (their reasons are in trials.jsonl).")
        print(f"Recipe: {summary['best_recipe']}")
    return code
