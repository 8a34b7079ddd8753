"""`mergesmith try` and `mergesmith perplexity`: generate side by side, and perplexity on a text."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guiapp.cli.options import seed_value
from guiapp.cli.process import EXIT_FAILED, EXIT_OK
from guiapp.cli.terminal import print_explanation, run_with_summary


def add_try_commands(commands: argparse._SubParsersAction) -> None:
    from guiapp.inference.sampling import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, LONG_PROMPT_CHOICES, TRUNCATE  # no torch

    model_help = "A model folder, a Hub id, or BASE+ADAPTER (a PEFT LoRA adapter on its base), as in recipes."
    try_help = "Generate text with one to four models side by side."
    try_ = commands.add_parser("try", help=try_help, description=try_help + " Each model writes a continuation of "
                               "the prompt in turn, as it is decoded (greedy unless --sample).")
    try_.add_argument("models", nargs="+", metavar="MODEL", help=model_help)
    try_.add_argument("--prompt", required=True, help="The prompt (the model's chat template is applied if it has one).")
    try_.add_argument("--max-new-tokens", type=int, default=128, help="Stop after this many new tokens (default: 128).")
    try_.add_argument("--sample", action="store_true", help="Sample instead of picking the likeliest token.")
    try_.add_argument("--seed", type=seed_value, default=0, help="Seed for --sample (default: 0).")
    try_.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                      help=f"For --sample: lower picks likelier tokens (default: {DEFAULT_TEMPERATURE}).")
    try_.add_argument("--top-p", type=float, default=DEFAULT_TOP_P,
                      help=f"For --sample: draw from the likeliest tokens holding this much probability "
                      f"(default: {DEFAULT_TOP_P}).")
    try_.add_argument("--long-prompt", choices=LONG_PROMPT_CHOICES, default=TRUNCATE,
                      help="A prompt longer than a model reads: keep its end, with a warning (truncate, the "
                      "default), or stop (refuse).")
    try_.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or xpu (default: cpu).")
    try_.add_argument("--dtype", default=None, help="Run in this dtype where the device can (default: the model's).")
    try_.set_defaults(handler=_run_try)
    perplexity_help = "Perplexity of one to four models on your text (encoders: similarity of sentence pairs)."
    perplexity = commands.add_parser(
        "perplexity", help=perplexity_help, description=perplexity_help + " Lower perplexity means the model finds "
        "the text more predictable; compare models on the same text.")
    perplexity.add_argument("models", nargs="+", metavar="MODEL", help=model_help)
    perplexity.add_argument("--text", required=True, type=Path, help="A .txt file, or .jsonl with a \"text\" field.")
    perplexity.add_argument("--window", type=int, default=512, help="Tokens per window (default: 512).")
    perplexity.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or xpu (default: cpu).")
    perplexity.add_argument("--dtype", default=None, help="Run in this dtype where the device can (default: the model's).")
    perplexity.add_argument("--json", action="store_true", help="Print one JSON object per model.")
    perplexity.set_defaults(handler=_run_perplexity)


def _run_try(args: argparse.Namespace) -> int:
    from guiapp.jobs.runner import JobListeners, JobStatus, run_job
    from guiapp.jobs.tryout import try_job

    current = {"index": -1}

    def on_output(index: int, text: str) -> None:
        if index != current["index"]:
            current["index"] = index
            print(f"\n=== {args.models[index]} ===", flush=True)
        print(text, end="", flush=True)

    job = try_job(args.models, args.prompt, max_new_tokens=args.max_new_tokens, sample=args.sample, seed=args.seed,
                  temperature=args.temperature, top_p=args.top_p, long_prompt=args.long_prompt, device=args.device,
                  dtype=args.dtype, on_output=on_output)
    result = run_job(job, JobListeners(on_log=lambda job_, line: print(line, file=sys.stderr)))
    print()
    for generation in (result.summary or {}).get("generations", []):
        if generation["untrained"]:
            print(f"({generation['model']} is {generation['untrained']}.)")
    if result.status is JobStatus.FAILED:
        print_explanation(result.error, args)
    return EXIT_OK if result.status is JobStatus.DONE else EXIT_FAILED


def _run_perplexity(args: argparse.Namespace) -> int:
    import json

    from guiapp.inference.running import read_text_file
    from guiapp.jobs.tryout import perplexity_job

    job = perplexity_job(args.models, read_text_file(args.text), window=args.window, device=args.device,
                         dtype=args.dtype)
    summary, code = run_with_summary(job, args)
    if code != EXIT_OK:
        return code
    for entry in summary["results"]:
        if args.json:
            print(json.dumps(entry))
        elif entry["perplexity"] is not None:
            untrained = f" — {entry['untrained']}" if entry["untrained"] else ""
            print(f"{entry['model']}: perplexity {entry['perplexity']:.3f} over {entry['tokens']} tokens "
                  f"({entry['dtype']}){untrained}")
        else:
            print(f"{entry['model']}: encoder, mean cosine similarity {entry['mean_similarity']:.4f} over "
                  f"{len(entry['similarities'])} sentence pairs ({entry['dtype']})")
    return EXIT_OK
