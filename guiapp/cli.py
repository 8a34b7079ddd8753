"""The `mergesmith` command: the same jobs as the window, without one.

Exit codes: 0 done, 1 failed (an explanation is printed), 2 bad usage. Commands that compute nothing
(`hub`, `explain`, `--version`) never import torch, so every heavy import happens inside a command's handler.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
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


# --- progress on a terminal -------------------------------------------------------------------------------


class TerminalProgress:
    """Prints job progress: a redrawn one-line bar on a terminal, plain lines (one per 10 %) otherwise."""

    def __init__(self, stream=sys.stderr) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._stage = ""
        self._last_decile = -1
        self._line_open = False

    def on_event(self, job, event) -> None:
        if event.stage != self._stage:
            self.finish()
            self._stage, self._last_decile = event.stage, -1
            if not self._tty:
                print(f"{event.stage}…", file=self._stream, flush=True)
        if self._tty:
            width = 30
            filled = int(event.fraction * width)
            rate = f" {event.rate / 1e6:6.1f} MB/s" if event.rate else ""
            eta = f" ETA {_duration(event.eta)}" if event.eta is not None else ""
            line = f"\r{event.stage:<18} [{'#' * filled}{'.' * (width - filled)}] {event.done}/{event.total}{rate}{eta}"
            self._stream.write(line[:120].ljust(120))
            self._stream.flush()
            self._line_open = True
        else:
            decile = int(event.fraction * 10)
            if decile > self._last_decile and event.done:
                self._last_decile = decile
                print(f"  {event.done}/{event.total} ({event.fraction:.0%}) {event.item}", file=self._stream, flush=True)

    def on_log(self, job, line: str) -> None:
        self.finish()
        print(line, file=self._stream, flush=True)

    def finish(self) -> None:
        if self._line_open:
            self._stream.write("\n")
            self._line_open = False


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def run_in_terminal(job) -> int:
    """Run `job` here with terminal progress; print its explanation on failure. Returns the exit code."""
    from guiapp.jobs.runner import JobListeners, JobStatus, run_job  # noqa: PLC0415

    printer = TerminalProgress()
    result = run_job(job, JobListeners(on_event=printer.on_event, on_log=printer.on_log))
    printer.finish()
    if result.status is JobStatus.DONE:
        return EXIT_OK
    if result.status is JobStatus.FAILED:
        _print_explanation(result.error)
    return EXIT_FAILED


# --- merge and demo ------------------------------------------------------------------------------------------


def _add_merge_commands(commands: argparse._SubParsersAction) -> None:
    merge = commands.add_parser("merge", help="Merge models as a mergekit-compatible YAML recipe says.")
    merge.add_argument("recipe", type=Path, help="The recipe (.yml).")
    merge.add_argument("out_dir", type=Path, help="The folder to create for the merged model.")
    merge.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or xpu (default: cpu).")
    merge.add_argument("--out-shard-size", default="5GB", help="Largest output file, e.g. 2GB (default: 5GB).")
    merge.add_argument("--dry-run", action="store_true", help="Validate and print the plan; write nothing.")
    merge.add_argument("--seed", type=int, default=0, help="Seed for the random methods (DARE, DELLA).")
    merge.add_argument("--overwrite", action="store_true", help="Replace OUT_DIR if it exists (once the merge is done).")
    merge.set_defaults(handler=_run_merge)

    demo = commands.add_parser("demo", help="Generate two small sample models and merge them (no download).")
    demo.add_argument("--out", type=Path, default=None, help="Where to put the sample models and the merge.")
    demo.set_defaults(handler=_run_demo)


def _run_merge(args: argparse.Namespace) -> int:
    from guiapp.engine.output import parse_size  # noqa: PLC0415
    from guiapp.engine.recipe import load_recipe  # noqa: PLC0415
    from guiapp.jobs.specs import merge_job  # noqa: PLC0415

    try:
        shard_bytes = parse_size(args.out_shard_size)
    except ValueError as error:
        print(f"mergesmith merge: --out-shard-size: {error}", file=sys.stderr)
        return EXIT_USAGE
    recipe = load_recipe(args.recipe)
    if args.dry_run:
        return _print_plan(recipe, args.out_dir)
    return run_in_terminal(merge_job(recipe, args.out_dir, device=args.device, seed=args.seed,
                                     shard_bytes=shard_bytes, overwrite=args.overwrite))


def _print_plan(recipe, out_dir: Path) -> int:
    from guiapp.engine.merge import plan_merge  # noqa: PLC0415

    plan = plan_merge(recipe)
    print(f"Method:        {plan.method.name} ({plan.method.summary})")
    for model in plan.models:
        role = " (base)" if recipe.base_model == model.ref else ""
        print(f"Model:         {model.label}{role}")
    print(f"Tensors:       {len(plan.tasks)}")
    print(f"Output:        {out_dir} ({plan.output_bytes / 1e9:.2f} GB as {str(plan.out_dtype).removeprefix('torch.')})")
    print(f"Reads:         {plan.input_bytes / 1e9:.2f} GB, computed in {str(plan.compute_dtype).removeprefix('torch.')}")
    for warning in plan.warnings:
        print(f"Warning:       {warning}")
    print("The recipe is valid. Nothing was written (--dry-run).")
    return EXIT_OK


def _run_demo(args: argparse.Namespace) -> int:
    from guiapp.jobs.demo import default_demo_folder, prepare_demo  # noqa: PLC0415
    from guiapp.jobs.specs import merge_job  # noqa: PLC0415

    folder = args.out or default_demo_folder()
    print(f"Writing two small sample models to {folder} …", file=sys.stderr)
    recipe = prepare_demo(folder)
    output = folder / "merged"
    code = run_in_terminal(merge_job(recipe, output, overwrite=True))
    if code == EXIT_OK:
        print(f"The merged sample model is in {output}. Its recipe: {output / 'mergesmith_recipe.yml'}")
    return code
