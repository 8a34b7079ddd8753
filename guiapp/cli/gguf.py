"""`mergesmith export-gguf`: a model as one GGUF file for llama.cpp, LM Studio and Ollama."""

from __future__ import annotations

import argparse
from pathlib import Path

from guiapp.cli.options import add_threads_option
from guiapp.cli.process import EXIT_OK
from guiapp.cli.terminal import run_with_summary


def add_gguf_command(commands: argparse._SubParsersAction) -> None:
    from guiapp.facts.gguf_types import KIND_WORDS  # plain data: no gguf, NumPy or torch

    export = commands.add_parser("export-gguf", help="Write a model as one GGUF file for llama.cpp, LM Studio and "
                                 "Ollama.")
    export.add_argument("model", metavar="MODEL", help="A model folder, a Hub id, or BASE+ADAPTER.")
    export.add_argument("out", type=Path, metavar="OUT.gguf", help="The file to create.")
    export.add_argument("--type", required=True, choices=list(KIND_WORDS), type=str.lower,
                        help="How the weights are stored: f32, f16, bf16, q8_0, q6_k, q5_k_m, q4_k_m or q4_0.")
    export.add_argument("--dry-run", action="store_true", help="Print the plan, the size of each type and the "
                        "time estimate; write nothing.")
    export.add_argument("--check", action="store_true", help="Then compare the file's perplexity with the "
                        "source model's.")
    export.add_argument("--text", type=Path, default=None, help="For --check: a .txt file (default: a built-in "
                        "text).")
    export.add_argument("--json", action="store_true", help="Print the result as one JSON object.")
    add_threads_option(export)
    export.set_defaults(handler=_run_export_gguf)


def _run_export_gguf(args: argparse.Namespace) -> int:
    import json

    from guiapp.gguf.export import dry_run, format_dry_run
    from guiapp.system.units import three_digits

    if args.dry_run:
        report = dry_run(args.model, args.out, args.type)
        print(json.dumps(report) if args.json else format_dry_run(report))
        return EXIT_OK
    from guiapp.inference.running import read_text_file
    from guiapp.jobs.gguf_export import gguf_export_job

    text = read_text_file(args.text) if args.text else None
    job = gguf_export_job(args.model, args.out, args.type, check=args.check, text=text, threads=args.threads)
    summary, code = run_with_summary(job, args)
    if code == EXIT_OK:
        print(json.dumps(summary) if args.json else f"GGUF:    {summary['file']} ({three_digits(summary['bytes'])})")
        if "check" in summary and not args.json:
            print(f"Check:   {summary['check']['summary']}")
    return code
