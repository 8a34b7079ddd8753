"""The `mergesmith` command: the same jobs as the window, without one.

Exit codes: 0 done, 1 failed (an explanation is printed), 2 bad usage. Commands that compute nothing
(`hub`, `explain`, `--version`) never import torch, so every heavy import happens inside a command's handler.
"""

from __future__ import annotations

import argparse
import signal
import sys

from guiapp import __version__
from guiapp.cli.gguf import add_gguf_command
from guiapp.cli.hub import add_hub_commands
from guiapp.cli.lab import add_lab_command
from guiapp.cli.lora import add_lora_commands, add_lora_toolbox_commands
from guiapp.cli.merge import add_merge_commands
from guiapp.cli.moe import add_moe_command
from guiapp.cli.process import (
    EXIT_FAILED,
    EXIT_OK,
    Diagnostics,
    Handler,
    discard_output,
    output_closed,
    print_any_text,
    stop_on_termination_signals,
)
from guiapp.cli.system import add_system_commands
from guiapp.cli.terminal import print_explanation
from guiapp.cli.tryout import add_try_commands


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser; a command's namespace carries its `handler`, none when the window is asked for."""
    parser = argparse.ArgumentParser(
        prog="mergesmith",
        description="Merge open models and extract LoRA adapters on your own workstation. "
        "Without a command, opens the window.",
    )
    parser.add_argument("--version", action="version", version=f"mergesmith {__version__}")
    parser.add_argument("--self-test", action="store_true",
                        help="Open the window (offscreen without a display), merge the sample models through it, "
                        "try the result on the Try page, and exit 0 if everything worked.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    add_merge_commands(commands)
    add_lora_commands(commands)
    add_lora_toolbox_commands(commands)
    add_moe_command(commands)
    add_lab_command(commands)
    add_gguf_command(commands)
    add_try_commands(commands)
    add_hub_commands(commands)
    add_system_commands(commands)
    return parser


def run_command(args: argparse.Namespace) -> int:
    """Run the command `args` names (its `handler`) and return its exit code. Every failure ends as a printed
    explanation (the traceback goes to a file), Ctrl-C, SIGTERM and SIGHUP as "Interrupted", and a closed output pipe
    quietly, as other Unix tools end."""
    handler: Handler = args.handler
    previous_handlers = stop_on_termination_signals()
    print_any_text()
    stderr = sys.stderr
    sys.stderr = Diagnostics(stderr)
    try:
        code = handler(args)
        sys.stdout.flush()  # here, where a closed pipe can still be told apart, not at interpreter exit
        return code
    except KeyboardInterrupt:
        print("\nInterrupted. Nothing was left behind.", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError as error:
        if not output_closed():
            print_explanation(error, args)
            return EXIT_FAILED
        discard_output()
        return EXIT_OK
    except Exception as error:  # every failure ends as an explanation, never a bare traceback
        print_explanation(error, args)
        return EXIT_FAILED
    except BaseException as error:  # a native library's panic (pyo3's PanicException) is a BaseException too
        if isinstance(error, (SystemExit, GeneratorExit)):
            raise
        print_explanation(error, args)
        return EXIT_FAILED
    finally:
        sys.stderr = stderr
        for signum, previous in previous_handlers.items():
            signal.signal(signum, previous)
