"""The `mergesmith` command: the same jobs as the window, without one.

Exit codes: 0 done, 1 failed (an explanation is printed), 2 bad usage. Commands that compute nothing
(`hub`, `explain`, `--version`) never import torch, so every heavy import happens inside a command's handler.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from guiapp import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        return _launch_window(args)
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("\nInterrupted. Nothing was left behind.", file=sys.stderr)
        return EXIT_FAILED
    except Exception as error:  # every failure ends as an explanation, never a bare traceback
        _print_explanation(error)
        return EXIT_FAILED


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mergesmith",
        description="Merge open models and extract LoRA adapters on your own workstation. "
        "Without a command, opens the window.",
    )
    parser.add_argument("--version", action="version", version=f"mergesmith {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_merge_commands(commands)
    return parser


def _launch_window(args: argparse.Namespace) -> int:
    from guiapp.ui.app import run_app  # noqa: PLC0415 - Qt only loads when the window is wanted

    return run_app()


def _print_explanation(error: BaseException) -> None:
    from guiapp.system.explain import explain  # noqa: PLC0415

    print(explain(error).render_text(), file=sys.stderr)


# --- merge and demo ------------------------------------------------------------------------------------------


def _add_merge_commands(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="Generate two small sample models and merge them (no download).")
    demo.add_argument("--out", default=None, help="Where to put the sample models and the merge.")
    demo.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    raise NotImplementedError
