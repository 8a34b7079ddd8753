"""`mergesmith probe` and `mergesmith explain`."""

from __future__ import annotations

import argparse
import sys

from guiapp.cli.process import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def add_system_commands(commands: argparse._SubParsersAction) -> None:
    probe = commands.add_parser(
        "probe", help="Show what this machine can do: the dtype to store models in on each device, the devices "
        "(--verbose: dtypes × operations, speeds); cached.")
    probe.add_argument("--json", action="store_true", help="Print the full probe result as JSON.")
    probe.add_argument("--refresh", action="store_true", help="Probe again instead of using the cached result.")
    probe.add_argument("--verbose", action="store_true",
                       help="Also print every operation tested in each dtype, the failures and the speeds.")
    probe.set_defaults(handler=_run_probe)
    explain = commands.add_parser(
        "explain", help="Explain an error message or traceback. Exits 1 when Mergesmith does not recognise it.")
    explain.add_argument("text", nargs="?", default="-", help="The error text; - or nothing reads it from stdin.")
    explain.set_defaults(handler=_run_explain)


def _run_probe(args: argparse.Namespace) -> int:
    import json

    from guiapp.system.probe import cached_probe, probe
    from guiapp.system.report import format_probe_report

    result = None if args.refresh else cached_probe()
    if result is None:
        print("Probing this machine (a few seconds)...", file=sys.stderr)
        result = probe(refresh=True)
    print(json.dumps(result.to_json(), indent=2) if args.json else format_probe_report(result, args.verbose))
    if args.verbose and not args.json:
        from guiapp.checkpoints.quantized.compiled import cpu_summary  # torch: not for the short answer

        print(f"\n{cpu_summary()}")
    return EXIT_OK if result.problem is None else EXIT_FAILED


def _run_explain(args: argparse.Namespace) -> int:
    from guiapp.system.explain import explain

    if args.text == "-" and sys.stdin.isatty():
        print("Paste the error text, then press Ctrl-D (Ctrl-Z and Enter on Windows):", file=sys.stderr)
    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        print("Nothing to explain: paste an error message or traceback, or pipe it in.", file=sys.stderr)
        return EXIT_USAGE
    explanation = explain(text)
    print(explanation.render_text(retry=lambda remedy: None))  # no command of ours to retry
    return EXIT_OK if explanation.recognised else EXIT_FAILED
