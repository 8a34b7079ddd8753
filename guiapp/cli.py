"""The `mergesmith` command: the same jobs as the window, without one.

Exit codes: 0 done, 1 failed (an explanation is printed), 2 bad usage. Commands that compute nothing
(`hub`, `explain`, `--version`) never import torch, so every heavy import happens inside a command's handler.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from guiapp import __version__
from guiapp.system.memory import configure_heaps

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    configure_heaps()
    _leave_a_deleted_working_folder()
    parser = _build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        return _launch_window(args)
    previous_handlers = _stop_on_termination_signals()
    _print_any_text()
    stderr = sys.stderr
    sys.stderr = _Diagnostics(stderr)
    try:
        code = handler(args)
        sys.stdout.flush()  # here, where a closed pipe can still be told apart, not at interpreter exit
        return code
    except KeyboardInterrupt:
        print("\nInterrupted. Nothing was left behind.", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError as error:
        if not _output_closed():
            _print_explanation(error, args)
            return EXIT_FAILED
        _discard_output()
        return EXIT_OK
    except Exception as error:  # every failure ends as an explanation, never a bare traceback
        _print_explanation(error, args)
        return EXIT_FAILED
    except BaseException as error:  # a native library's panic (pyo3's PanicException) is a BaseException too
        if isinstance(error, (SystemExit, GeneratorExit)):
            raise
        _print_explanation(error, args)
        return EXIT_FAILED
    finally:
        sys.stderr = stderr
        for signum, previous in previous_handlers.items():
            signal.signal(signum, previous)


def _stop_on_termination_signals() -> dict[int, Any]:
    """Make SIGTERM (a `kill`, a service manager stopping us) and SIGHUP (the terminal closed) end a command as
    Ctrl-C does: the job is abandoned and its staging folder removed. Returns the previous handlers by signal,
    none where signals cannot be set here."""

    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return {}
    signals = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])  # no SIGHUP on Windows
    return {signum: signal.signal(signum, interrupt) for signum in signals}


def _leave_a_deleted_working_folder() -> None:
    """Work from the home folder (else the file system's root) when the folder this command started in has been
    deleted, saying so: torch's libraries abort at import in a working folder that no longer exists."""
    try:
        os.getcwd()
        return
    except FileNotFoundError:
        pass
    home = Path.home() if os.environ.get("HOME") else Path(os.sep)
    try:
        os.chdir(home)
    except OSError:
        home = Path(os.sep)
        os.chdir(home)
    print(f"Note: the working folder this command started in no longer exists; working from {home} instead "
          "(paths that do not start with / are taken from there).", file=sys.stderr)


def _print_any_text() -> None:
    """Let stdout and stderr print any text, whatever their encoding (PYTHONIOENCODING=ascii, a Latin-1 terminal):
    what the encoding cannot hold, such as a folder name's undecodable bytes, is printed as a backslash escape
    instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):  # not a text stream of a file (a test's replacement)
            continue


def _output_closed() -> bool:
    """Whether stdout or stderr is a pipe whose reader has gone (`mergesmith … | head` after head exited).

    Such a pipe is where the output was going, not a failure: like other Unix tools, the command then ends
    quietly. A BrokenPipeError from anywhere else (a socket to the Hub) is a real failure."""
    import select

    if not hasattr(select, "poll"):  # Windows: a broken pipe there can only be the output's
        return True
    poll = select.poll()
    for stream in (sys.stdout, sys.stderr):
        try:
            poll.register(stream.fileno(), select.POLLOUT)
        except (OSError, ValueError, AttributeError):
            continue
    return any(events & select.POLLERR for _, events in poll.poll(0))


def _discard_output() -> None:
    """Point stdout and stderr at the null device, so that Python's flush at exit does not report the closed
    pipe again."""
    for stream in (sys.stdout, sys.stderr):
        _to_null_device(stream)


def _to_null_device(stream) -> None:
    """Make what is written to `stream` go to the null device from now on (nothing if it has no file)."""
    try:
        descriptor = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, descriptor)
    finally:
        os.close(null)


class _Diagnostics(io.TextIOBase):
    """sys.stderr while a command runs. Once its reader has gone (`mergesmith … 2>&1 | head`), what is written
    goes to the null device instead of failing the command: progress and notes are not what it is run for."""

    def __init__(self, stream) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _to_null_device(self._stream)
            return self._stream.write(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _to_null_device(self._stream)
            self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()


def _build_parser() -> argparse.ArgumentParser:
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
    _add_merge_commands(commands)
    _add_lora_commands(commands)
    _add_try_commands(commands)
    _add_hub_commands(commands)
    _add_system_commands(commands)
    return parser


def _launch_window(args: argparse.Namespace) -> int:
    import os

    if args.self_test and _display_left_over():
        # The self-test opens the window offscreen when there is no display, and so when the one named is gone.
        print(f"{_display_gone()} The self-test runs without a screen.", file=sys.stderr)
        os.environ.pop("DISPLAY")
    # Only a display it cannot use stops the self-test (without one, it opens the window offscreen).
    problem = _display_problem() if not args.self_test or os.environ.get("DISPLAY") else None
    if problem:
        print(problem, file=sys.stderr)
        return EXIT_FAILED
    if args.self_test:
        from guiapp.ui.self_test import run_self_test  # Qt only loads when the window is wanted

        return run_self_test()
    from guiapp.ui.app import exit_now, run_app

    exit_now(run_app())


def _display_problem() -> str | None:
    """Why the window cannot open on this Linux session (Qt would abort with a cryptic plugin error), or None."""
    import os

    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    if not os.environ.get("DISPLAY"):
        return ("Mergesmith's window needs a desktop session, and none was found (no DISPLAY or WAYLAND_DISPLAY).\n"
                f"{_WITHOUT_A_SCREEN}")
    if _display_left_over():
        return f"{_display_gone()}\n{_WITHOUT_A_SCREEN}"
    from guiapp.system.display_libraries import install_advice, missing_libraries, xcb_plugin

    plugin = xcb_plugin()
    try:
        missing = missing_libraries(plugin) if plugin is not None else []
    except (OSError, ValueError):  # an unreadable plugin: let Qt try, and say what it finds
        return None
    if missing:
        return (f"Mergesmith's window needs system libraries that are not installed: {', '.join(missing)}.\n"
                f"Qt's X11 support loads them at start-up and cannot open a window without them. Install them:\n"
                f"{install_advice(missing)}\nthen start Mergesmith again.")
    return None


_WITHOUT_A_SCREEN = ("Start it from your desktop; on a machine without a screen, run it on a virtual one with "
                     "`xvfb-run -a mergesmith` (Debian/Ubuntu package xvfb). The command line needs no display: "
                     "`mergesmith --help` lists the jobs it runs.")


def _display_left_over() -> bool:
    """True on Linux when DISPLAY names an X display that does not answer (left from an ended session, or copied
    from another machine): Qt would abort the process, blaming a library that is installed."""
    import os

    from guiapp.system.display_libraries import display_answers

    display = os.environ.get("DISPLAY")
    return (sys.platform.startswith("linux") and bool(display) and not os.environ.get("QT_QPA_PLATFORM")
            and not os.environ.get("WAYLAND_DISPLAY") and not display_answers(display))


def _display_gone() -> str:
    import os

    return (f"Mergesmith's window needs a desktop session, and the display DISPLAY={os.environ.get('DISPLAY')} "
            "names does not answer: no X server runs there (it may be left from a session that has ended).")


# How each of an explanation's retry_with settings is given on the command line: (the option's argparse dest,
# the flag). A setting that the running command has no flag for (force_download, a recipe's dtype) is not printed.
RETRY_FLAGS: dict[str, tuple[str, str]] = {
    "output": ("out", "--out {value}"),  # extract-lora and apply-lora (a merge's folder is an argument, no flag)
    "overwrite": ("overwrite", "--overwrite"),
    "force": ("force", "--force"),
    "device": ("device", "--device {value}"),
    "dtype": ("dtype", "--dtype {value}"),
    "compute_dtype": ("compute_dtype", "--compute-dtype {value}"),
    "long_prompt": ("long_prompt", "--long-prompt {value}"),
}


def _retry_flags(changes: Mapping[str, Any], args: argparse.Namespace | None) -> str | None:
    """"Retry with: --overwrite --device cpu" for the flags of the running command, or None if it has none."""
    flags = []
    for key, value in changes.items():
        dest, flag = RETRY_FLAGS.get(key, ("", ""))
        if not flag or args is None or not hasattr(args, dest) or value is False:
            continue
        flags.append(flag.format(value=value))
    return f"Retry with: {' '.join(flags)}" if flags else None


def _print_explanation(error: BaseException, args: argparse.Namespace | None = None) -> None:
    """Print the explanation without the traceback, which is saved to a file for bug reports instead; its retry
    settings as the flags of the command `args` ran (none without it)."""
    from guiapp.system.explain import explain
    from guiapp.system.probe import cache_dir

    explanation = explain(error)
    print(explanation.render_text(details=False, retry=lambda changes: _retry_flags(changes, args)), file=sys.stderr)
    details = cache_dir() / "last-error.txt"
    try:
        details.parent.mkdir(parents=True, exist_ok=True)
        details.write_text(explanation.raw + "\n", encoding="utf-8", errors="backslashreplace")
    except OSError:
        return
    print(f"\nThe full error report is in {details}.", file=sys.stderr)


# --- progress on a terminal -------------------------------------------------------------------------------


class TerminalProgress:
    """Prints job progress: a redrawn one-line bar on a terminal, plain lines (one per 10 %) otherwise."""

    def __init__(self, stream=None) -> None:
        self._stream = stream or sys.stderr  # looked up now: a command's sys.stderr survives a closed pipe
        self._tty = self._stream.isatty()
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
            line = f"{event.stage:<18} [{'#' * filled}{'.' * (width - filled)}] {event.done}/{event.total}{rate}{eta}"
            # One column short of the width: a character in the last column makes some terminals wrap.
            columns = self._columns() - 1
            self._stream.write("\r" + line[:columns].ljust(columns))
            self._stream.flush()
            self._line_open = True
        else:
            decile = int(event.fraction * 10)
            if decile > self._last_decile and event.done:
                self._last_decile = decile
                print(f"  {_counted(event)}" + (f": {event.item}" if event.item else ""), file=self._stream,
                      flush=True)

    def _columns(self) -> int:
        """The terminal's width now (it may have been resized), or 80 when the stream cannot say."""
        try:
            return os.get_terminal_size(self._stream.fileno()).columns or 80
        except (OSError, ValueError, AttributeError):
            return 80

    def on_log(self, job, line: str) -> None:
        self.finish()
        print(line, file=self._stream, flush=True)

    def finish(self) -> None:
        if self._line_open:
            self._stream.write("\n")
            self._line_open = False


def _counted(event) -> str:
    """"3 of 21, 40% of the bytes": the count, and the share done, saying what it measures when that is the bytes
    (a few large tensors make the two differ)."""
    if event.bytes_total > 0:
        return f"{event.done} of {event.total}, {event.fraction:.0%} of the bytes"
    return f"{event.done} of {event.total} ({event.fraction:.0%})"


def _duration(seconds: float) -> str:
    seconds = math.ceil(seconds)  # rounded up: "0m00s" only when nothing is left
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def run_in_terminal(job, args: argparse.Namespace | None = None) -> int:
    """Run `job` here with terminal progress; print its explanation on failure (retry settings as the flags of
    the command `args` ran). Returns the exit code."""
    from guiapp.jobs.runner import JobListeners, JobStatus, run_job

    printer = TerminalProgress()
    result = run_job(job, JobListeners(on_event=printer.on_event, on_log=printer.on_log))
    printer.finish()
    if result.status is JobStatus.DONE:
        return EXIT_OK
    if result.status is JobStatus.FAILED:
        _print_explanation(result.error, args)
    return EXIT_FAILED


# --- merge and demo ------------------------------------------------------------------------------------------


def _add_merge_commands(commands: argparse._SubParsersAction) -> None:
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
    merge.add_argument("--seed", type=_seed, default=0, help="Seed for the random methods (DARE, DELLA).")
    merge.add_argument("--overwrite", action="store_true", help="Replace OUT_DIR if it exists (once the merge is done).")
    merge.add_argument("--force", action="store_true", help="Start even when the estimate says it will not fit.")
    merge.add_argument("--compute-dtype", choices=("float32", "recipe"), default="float32",
                       help="float32 (default): compute in float32 and round once when storing, the more accurate; "
                       "recipe: compute in the recipe's dtype as mergekit does, to reproduce a published merge.")
    _add_threads_option(merge)
    merge.set_defaults(handler=_run_merge)

    demo = commands.add_parser(
        "demo", help="Generate a small base model and two fine-tunes of it, and merge them (no download).",
        description="Generate three small sample models (a base and two fine-tunes of it) and merge the "
        "fine-tunes with TIES, without downloading anything: a whole job in seconds. Running it again reuses "
        "the sample models and replaces the earlier merge.")
    demo.add_argument("--out", type=Path, default=None, help="Where to put the sample models and the merge.")
    demo.set_defaults(handler=_run_demo)


def _add_threads_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--threads", type=_count_of("threads"), default=None, metavar="N",
                         help="Use at most N CPU threads for the compute-heavy steps (default: the cores other "
                         "programs leave free; simple additions always use one).")


def _count_of(noun: str, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type for a count of `noun` from 1 (to `maximum`): the number, or a usage error saying the range."""
    allowed = f" from 1 to {maximum}" if maximum is not None else ", 1 or more"

    def count(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = 0
        if number < 1 or (maximum is not None and number > maximum):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {noun}: give a whole number{allowed}.")
        return number

    return count


MAX_SEED = 2**64 - 1  # torch's generators take 64-bit seeds


def _seed(text: str) -> int:
    """An argparse type for a random seed: a whole number from 0 to MAX_SEED, or a usage error saying so."""
    try:
        number = int(text)
    except ValueError:
        number = -1
    if not 0 <= number <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a seed: give a whole number from 0 to {MAX_SEED}.")
    return number


MAX_SEARCH_RESULTS = 1000  # ten pages of the Hub's answers; a narrower query finds a model faster than more rows


def _finite_number(text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give one such as 1 or 0.5.")
    return number


def _run_merge(args: argparse.Namespace) -> int:
    from guiapp.engine.output import parse_size
    from guiapp.engine.recipe import load_recipe
    from guiapp.jobs.specs import merge_job

    try:
        shard_bytes = parse_size(args.out_shard_size)
    except ValueError as error:
        print(f"mergesmith merge: --out-shard-size: {error}", file=sys.stderr)
        return EXIT_USAGE
    recipe = load_recipe(args.recipe)
    if args.dry_run:
        return _print_plan(recipe, args.out_dir, args.device, args.compute_dtype)
    return run_in_terminal(merge_job(recipe, args.out_dir, device=args.device, seed=args.seed,
                                     shard_bytes=shard_bytes, overwrite=args.overwrite, force=args.force,
                                     compute_dtype=args.compute_dtype, threads=args.threads), args)


def _print_plan(recipe, out_dir: Path, device: str, compute_dtype: str = "float32") -> int:
    from guiapp.engine.merge import plan_merge
    from guiapp.engine.plan import compute_in_recipe_dtype
    from guiapp.jobs.durations import process_seconds_so_far
    from guiapp.jobs.estimates import estimate_merge
    from guiapp.system.probe import cached_probe
    from guiapp.system.units import format_bytes

    plan = plan_merge(recipe)
    if compute_dtype == "recipe":
        compute_in_recipe_dtype(plan)
    # The real run is a new process too: its start-up (Python, torch, planning) counts as this one's did.
    estimate = estimate_merge(plan, device, out_dir, cached_probe(), startup_seconds=process_seconds_so_far())
    print(f"Method:        {plan.method.name} ({plan.method.summary})")
    for model in plan.models:
        role = " (base)" if recipe.base_model == model.ref else ""
        print(f"Model:         {model.label}{role}")
    print(f"Tensors:       {len(plan.tasks)}")
    print(f"Output:        {out_dir} ({format_bytes(plan.output_bytes)} as {str(plan.out_dtype).removeprefix('torch.')})")
    print(f"Reads:         {format_bytes(plan.input_bytes)}, computed in {str(plan.compute_dtype).removeprefix('torch.')}")
    for warning in plan.warnings:
        print(f"Warning:       {warning}")
    print("Estimate:      " + estimate.summary().replace("\n", "\n               "))
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


# --- hub: the model library ----------------------------------------------------------------------------------


def _add_hub_commands(commands: argparse._SubParsersAction) -> None:
    hub = commands.add_parser("hub", help="Search, inspect, download and manage models from the Hugging Face Hub.")
    hub.add_argument("--offline", action="store_true", help="Use only what is on this machine (like HF_HUB_OFFLINE=1).")
    hub_commands = hub.add_subparsers(title="hub commands", metavar="HUB_COMMAND", required=True)

    search = hub_commands.add_parser("search", help="Search models on the Hub.")
    search.add_argument("query", nargs="?", default="", help="Text to look for in model names.")
    search.add_argument("--sort", default="trending", choices=["trending", "downloads", "likes", "updated"],
                        help="Order of the results: trending (popular lately, the default), downloads (most "
                        "downloaded), likes (most liked) or updated (most recently changed).")
    search.add_argument("--limit", type=_count_of("results", MAX_SEARCH_RESULTS), default=20,
                        help=f"How many results (default: 20, at most {MAX_SEARCH_RESULTS}).")
    search.add_argument("--author", default=None, help="Only models of this user or organisation.")
    search.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    search.set_defaults(handler=_run_hub_search)

    info = hub_commands.add_parser("info", help="Show a model's details (and tensors) without downloading weights.")
    info.add_argument("repo", help="A Hub model id, optionally with @revision.")
    info.add_argument("--tensors", action="store_true", help="Also list tensors from the safetensors headers.")
    info.add_argument("--json", action="store_true", help="Print JSON.")
    info.set_defaults(handler=_run_hub_info)

    check = hub_commands.add_parser("check", help="Check from headers alone whether models can be merged.")
    check.add_argument(
        "models", nargs="+", help="Hub ids (optionally @revision) and local folders; the first is the base."
    )
    check.set_defaults(handler=_run_hub_check)

    download = hub_commands.add_parser("download", help="Download the files a merge needs into the Hugging Face cache.")
    download.add_argument("repo", help="A Hub model id, optionally with @revision.")
    download.add_argument("--revision", default=None, help="Branch, tag or commit (default: main).")
    download.set_defaults(handler=_run_hub_download)

    cache = hub_commands.add_parser("cache", help="List the models in the Hugging Face cache.")
    cache.add_argument("--json", action="store_true", help="Print JSON.")
    cache.set_defaults(handler=_run_hub_cache)

    remove = hub_commands.add_parser("rm", help="Delete a model from the Hugging Face cache.")
    remove.add_argument("repo", help="The cached model id.")
    remove.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
    remove.set_defaults(handler=_run_hub_rm)

    upload = hub_commands.add_parser(
        "upload", help="Publish a model folder to the Hub (private unless --public), with a model card.")
    upload.add_argument("folder", type=Path, help="The model or adapter folder to publish.")
    upload.add_argument("repo", help="The repo to publish to: your-user-name/model-name (a bare name goes under "
                        "your user name).")
    visibility = upload.add_mutually_exclusive_group()
    visibility.add_argument("--private", dest="public", action="store_false", default=False,
                            help="Only you (and your organisation) can see it (the default).")
    visibility.add_argument("--public", dest="public", action="store_true", help="Everyone can see it.")
    upload.add_argument("--licence", "--license", dest="licence", default=None,
                        help="The licence in the card (default: the one the input models share, else 'other').")
    upload.add_argument("--force", action="store_true",
                        help="Publish the folder even though it does not look like a model or an adapter.")
    upload.set_defaults(handler=_run_hub_upload)


def _hub_setup(args: argparse.Namespace) -> None:
    from guiapp.hub.connection import set_offline

    set_offline(True if args.offline else None)  # without --offline, the environment decides


def _run_hub_search(args: argparse.Namespace) -> int:
    import json

    from guiapp.hub.search import ModelSearch, SearchQuery

    _hub_setup(args)
    query = SearchQuery(text=args.query, author=args.author, sort=args.sort, limit=args.limit)
    results = ModelSearch(page_size=args.limit).start(query).next_page()
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
        return EXIT_OK
    if not results:
        print("No models found.")
    for r in results:
        size = f"{_parameter_count(r.parameters)} params" if r.parameters else ""
        gated = "gated" if r.gated else ""
        print(f"{r.repo_id:<50} {r.downloads:>10} downloads {r.likes:>6} likes  {size:<14} {gated}")
    return EXIT_OK


def _parameter_count(count: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)


def _run_hub_info(args: argparse.Namespace) -> int:
    import json

    from guiapp.checkpoints.quantized.naming import settings_summary
    from guiapp.errors import CheckpointError
    from guiapp.hub.details import model_details, remote_tensors
    from guiapp.hub.references import ModelRef
    from guiapp.hub.resolve import read_model_metadata
    from guiapp.system.units import format_bytes, plural

    _hub_setup(args)
    ref = ModelRef.parse(args.repo)
    if ref.hub_id is None:
        print(f"mergesmith hub info: {_not_a_hub_id(ref)}", file=sys.stderr)
        return EXIT_USAGE
    details = model_details(ref.hub_id, ref.revision)
    tensors = remote_tensors(ref.hub_id, details.commit) if args.tensors else {}
    try:
        quantization = settings_summary(read_model_metadata(ModelRef.parse(f"{details.repo_id}@{details.commit}")).config)
    except CheckpointError:  # no config.json or no safetensors: the rest of the details stand
        quantization = None
    if args.json:
        data = {**details.to_json(), "quantization": quantization}
        if args.tensors:
            data["tensors"] = {
                t.name: {"shape": list(t.shape), "dtype": t.dtype, "file": t.file} for t in tensors.values()
            }
        print(json.dumps(data, indent=2))
        return EXIT_OK
    by_dtype = ", ".join(f"{count:,} {dtype}" for dtype, count in details.parameters_by_dtype.items())
    _print_shown(f"Model:         {details.repo_id} @ {details.revision} ({details.commit[:10]})")
    _print_shown(f"Page:          {details.page_url}")
    gated = " (gated: accept it on the page)" if details.gated else ""
    _print_shown(f"Licence:       {details.licence or 'not stated'}{gated}")
    _print_shown(f"Base model:    {', '.join(details.base_models) or '-'}")
    _print_shown(f"Parameters:    {by_dtype or 'unknown (no safetensors)'}")
    if quantization:
        _print_shown(f"Quantized:     {quantization}")
    _print_shown(f"Download:      {format_bytes(details.download_size)} needed for merging "
                 f"(repo: {format_bytes(details.repo_size)}, {plural(len(details.files), 'file')})")
    _print_shown(f"Popularity:    {details.downloads} downloads, {details.likes} likes")
    _print_shown(f"Updated:       {details.last_modified or '-'}")
    for t in tensors.values():
        _print_shown(f"  {t.name:<60} {t.dtype:<5} {'×'.join(map(str, t.shape))}")
    return EXIT_OK


def _print_shown(text: str) -> None:
    """Print a line holding what a Hub server sent, without its control characters (escape sequences)."""
    from guiapp.system.scrub import shown

    print(shown(text))


def _not_a_hub_id(ref) -> str:
    """Why a reference that is not a Hub id cannot be looked up on the Hub (hub info, hub download)."""
    from guiapp.errors import CheckpointError
    from guiapp.system.bounded import describe_value

    shown = describe_value(str(ref))
    try:
        folder = ref.existing_folder()
    except CheckpointError:  # no such folder: the text is simply not an id
        folder = None
    if folder is not None:
        return f"{shown} is a folder on this computer, not a Hub model id (org/name)."
    return (f"{shown} is not a Hub model id: an id is org/name, each part at most 96 letters, digits, "
            "'-', '_' or '.'.")


def _run_hub_check(args: argparse.Namespace) -> int:
    from guiapp.engine.compatibility import check_compatibility  # torch-free
    from guiapp.hub.references import ModelRef

    _hub_setup(args)
    report = check_compatibility([ModelRef.parse(text) for text in args.models])
    print(report.render_text())
    return EXIT_OK if report.compatible else EXIT_FAILED


def _run_hub_download(args: argparse.Namespace) -> int:
    from guiapp.hub.downloads import download_model
    from guiapp.hub.references import ModelRef
    from guiapp.progress import Progress

    _hub_setup(args)
    ref = ModelRef.parse(args.repo)
    if ref.hub_id is None:
        print(f"mergesmith hub download: {_not_a_hub_id(ref)}", file=sys.stderr)
        return EXIT_USAGE
    printer = TerminalProgress()
    progress = Progress(on_event=lambda event: printer.on_event(None, event))
    folder = download_model(ref.hub_id, args.revision or ref.revision, progress=progress)
    printer.finish()
    print(folder)
    return EXIT_OK


def _run_hub_cache(args: argparse.Namespace) -> int:
    import json

    from guiapp.hub.cache import scan_cache
    from guiapp.system.units import format_bytes, plural

    _hub_setup(args)
    models = scan_cache()
    if args.json:
        print(json.dumps([m.to_json() for m in models], indent=2))
        return EXIT_OK
    if not models:
        print("The Hugging Face cache holds no models.")
    for m in models:
        refs = ", ".join(ref for r in m.revisions for ref in r.refs) or plural(len(m.revisions), "revision")
        print(f"{m.repo_id:<50} {format_bytes(m.size):>10}  last used {m.last_used:%Y-%m-%d %H:%M}  ({refs})")
    return EXIT_OK


def _run_hub_rm(args: argparse.Namespace) -> int:
    from guiapp.hub.cache import plan_deletion
    from guiapp.system.units import format_bytes, plural

    _hub_setup(args)
    plan = plan_deletion(args.repo)
    question = (
        f"Delete {plan.repo_id} ({plural(len(plan.commits), 'revision')}) from the cache? "
        f"This frees {format_bytes(plan.freed_bytes)}."
    )
    if not args.yes:
        try:
            answer = input(f"{question} [y/N] ").strip().lower()
        except EOFError:  # no one to answer (stdin closed or at its end): never delete without a yes
            print("\nNothing was deleted: there is no input to answer the question; add --yes to delete without "
                  "asking.", file=sys.stderr)
            return EXIT_FAILED
        if answer not in ("y", "yes"):
            print("Nothing was deleted.")
            return EXIT_OK
    plan.execute()
    print(f"Deleted {plan.repo_id}; freed {format_bytes(plan.freed_bytes)}.")
    return EXIT_OK


def _run_hub_upload(args: argparse.Namespace) -> int:
    from guiapp.hub.publish_card import (
        base_models,
        input_licences,
        licence_warnings,
        preset_licence,
        publish_card,
    )
    from guiapp.hub.upload import check_upload, upload_folder
    from guiapp.progress import Progress

    _hub_setup(args)
    plan = check_upload(args.folder, args.repo, private=not args.public, any_folder=args.force)
    inputs = input_licences(base_models(args.folder))
    for warning in licence_warnings(inputs):
        print(f"Warning: {warning}", file=sys.stderr)
    card = publish_card(args.folder, plan.repo_id, args.licence or preset_licence(inputs))
    printer = TerminalProgress()
    url = upload_folder(plan, Progress(on_event=lambda event: printer.on_event(None, event)), card=card)
    printer.finish()
    print(f"Published {plan.repo_id} ({'private' if plan.private else 'public'}): {url}")
    return EXIT_OK


# --- system: probe and explain -------------------------------------------------------------------------------


def _add_system_commands(commands: argparse._SubParsersAction) -> None:
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
    print(explanation.render_text(retry=lambda changes: None))  # no command of ours to retry
    return EXIT_OK if explanation.recognised else EXIT_FAILED


# --- LoRA: extract and apply ---------------------------------------------------------------------------------


def _add_lora_commands(commands: argparse._SubParsersAction) -> None:
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
    extract.add_argument("--solver", choices=("randomized", "exact"), default="randomized",
                         help="randomized: fast, within 2 %% of the optimum (default); exact: full SVD.")
    extract.add_argument("--include", default=None, help="Only modules whose name matches this regular expression.")
    extract.add_argument("--exclude", default=None, help="Leave out modules whose name matches this regular expression.")
    extract.add_argument("--embeddings", choices=("save", "lora", "skip"), default="save",
                         help="Changed embeddings and output head: save whole (default), decompose, or skip.")
    extract.add_argument("--dtype", default=None, help="Adapter storage dtype (default: the fine-tune's).")
    extract.add_argument("--compute-dtype", choices=("float32", "float64"), default="float32",
                         help="Precision of the decomposition (default: float32).")
    extract.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or xpu (default: cpu).")
    extract.add_argument("--overwrite", action="store_true", help="Replace OUT if it exists (once the adapter is done).")
    extract.add_argument("--force", action="store_true", help="Start even when the estimate says it will not fit.")
    extract.add_argument("--dry-run", action="store_true", help="Check the inputs and print the plan and estimate; "
                         "write nothing.")
    _add_threads_option(extract)
    extract.set_defaults(handler=_run_extract_lora)

    apply = commands.add_parser("apply-lora", help="Apply a PEFT LoRA adapter to its base model: a full model folder.")
    apply.add_argument("--base", required=True, help="The base model: a folder or a Hub id.")
    apply.add_argument("--adapter", required=True, help="The adapter: a folder or a Hub id.")
    apply.add_argument("--out", required=True, type=Path, help="The model folder to create.")
    apply.add_argument("--scale", type=_finite_number, default=1.0,
                       help="Multiply the adapter's effect (default: 1).")
    apply.add_argument("--dtype", default=None, help="Output dtype (default: each tensor keeps the base's).")
    apply.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or xpu (default: cpu).")
    apply.add_argument("--out-shard-size", default="5GB", help="Largest output file, e.g. 2GB (default: 5GB).")
    apply.add_argument("--overwrite", action="store_true", help="Replace OUT if it exists (once the model is done).")
    apply.add_argument("--force", action="store_true", help="Start even when the estimate says it will not fit.")
    apply.add_argument("--dry-run", action="store_true", help="Check the inputs and print the plan and estimate; "
                       "write nothing.")
    _add_threads_option(apply)
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
    summary, code = _run_with_summary(job, args)
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
    summary, code = _run_with_summary(job, args)
    if code == EXIT_OK:
        from guiapp.system.units import format_bytes

        print(f"Model:   {summary['output']} ({format_bytes(summary['bytes'])}, {summary['tensors']} tensors: "
              f"{summary['changed']} changed by the adapter, {summary['replaced']} replaced)")
    return code


def _print_lora_plan(args: argparse.Namespace, rank: int | None = None, rule: tuple[str, float] | None = None) -> int:
    """`extract-lora --dry-run` (given `rank` and the `rule`'s mode and value) or `apply-lora --dry-run`: the
    inputs' headers are read, the plan and the estimate printed as `merge --dry-run` prints them; nothing is
    written."""
    from guiapp.engine.sources import read_headers
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
        from guiapp.engine.lowrank import RankRule

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


def _run_with_summary(job, args: argparse.Namespace) -> tuple[dict, int]:
    """Run `job` with terminal progress; returns the summary its work returned (empty on failure) and the exit
    code."""
    summary: dict = {}
    work = job.work

    def keep_summary(progress):
        summary.update(work(progress))
        return summary

    job.work = keep_summary
    return summary, run_in_terminal(job, args)


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


# --- try: generate side by side, perplexity ------------------------------------------------------------------


def _add_try_commands(commands: argparse._SubParsersAction) -> None:
    from guiapp.engine.sampling import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, LONG_PROMPT_CHOICES, TRUNCATE  # no torch

    model_help = "A model folder, a Hub id, or BASE+ADAPTER (a PEFT LoRA adapter on its base), as in recipes."
    try_help = "Generate text with one to four models side by side."
    try_ = commands.add_parser("try", help=try_help, description=try_help + " Each model writes a continuation of "
                               "the prompt in turn, as it is decoded (greedy unless --sample).")
    try_.add_argument("models", nargs="+", metavar="MODEL", help=model_help)
    try_.add_argument("--prompt", required=True, help="The prompt (the model's chat template is applied if it has one).")
    try_.add_argument("--max-new-tokens", type=int, default=128, help="Stop after this many new tokens (default: 128).")
    try_.add_argument("--sample", action="store_true", help="Sample instead of picking the likeliest token.")
    try_.add_argument("--seed", type=_seed, default=0, help="Seed for --sample (default: 0).")
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
        _print_explanation(result.error, args)
    return EXIT_OK if result.status is JobStatus.DONE else EXIT_FAILED


def _run_perplexity(args: argparse.Namespace) -> int:
    import json

    from guiapp.engine.inference import read_text_file
    from guiapp.jobs.tryout import perplexity_job

    job = perplexity_job(args.models, read_text_file(args.text), window=args.window, device=args.device,
                         dtype=args.dtype)
    summary, code = _run_with_summary(job, args)
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
