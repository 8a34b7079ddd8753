"""What a command prints while a job runs and when it fails: progress on a terminal, explanations with their
retry settings as this command's flags."""

from __future__ import annotations

import argparse
import math
import os
import sys

from guiapp.cli.process import EXIT_FAILED, EXIT_OK, PAUSE_VARIABLE


def print_explanation(error: BaseException, args: argparse.Namespace | None = None) -> None:
    """Print the explanation without the traceback, which is saved to a file for bug reports instead; its remedy
    as the flag of the command `args` ran (none without it, or when that command has no such option)."""
    from guiapp.jobs.remedies import as_flag
    from guiapp.system.explain import explain
    from guiapp.system.probe import cache_dir

    def has_option(dest: str) -> bool:
        return args is not None and hasattr(args, dest)

    explanation = explain(error)
    print(explanation.render_text(details=False, retry=lambda remedy: as_flag(remedy, has_option)), file=sys.stderr)
    details = cache_dir() / "last-error.txt"
    try:
        details.parent.mkdir(parents=True, exist_ok=True)
        details.write_text(explanation.raw + "\n", encoding="utf-8", errors="backslashreplace")
    except OSError:
        return
    print(f"\nThe full error report is in {details}.", file=sys.stderr)





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
            eta = f" ETA {duration_text(event.eta)}" if event.eta is not None else ""
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
    (a few large tensors make the two differ; the bar itself may follow the stage's work, see ProgressEvent)."""
    if event.bytes_total > 0:
        return f"{event.done} of {event.total}, {event.bytes_done / event.bytes_total:.0%} of the bytes"
    return f"{event.done} of {event.total} ({event.fraction:.0%})"


def duration_text(seconds: float) -> str:
    seconds = math.ceil(seconds)  # rounded up: "0m00s" only when nothing is left
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def run_in_terminal(job, args: argparse.Namespace | None = None) -> int:
    """Run `job` here with terminal progress; print its explanation on failure (retry settings as the flags of
    the command `args` ran). Returns the exit code."""
    from guiapp.jobs.runner import JobListeners, JobStatus, run_job

    printer = TerminalProgress()
    result = run_job(job, JobListeners(on_event=printer.on_event, on_log=printer.on_log), pause_at=_pause_point())
    printer.finish()
    if result.status is JobStatus.DONE:
        return EXIT_OK
    if result.status is JobStatus.FAILED:
        print_explanation(result.error, args)
    return EXIT_FAILED


def run_with_summary(job, args: argparse.Namespace) -> tuple[dict, int]:
    """Run `job` with terminal progress; returns the summary its work returned (empty on failure) and the exit
    code."""
    summary: dict = {}
    work = job.work

    def keep_summary(progress):
        summary.update(work(progress))
        return summary

    job.work = keep_summary
    return summary, run_in_terminal(job, args)


def _pause_point():
    """The PausePoint PAUSE_VARIABLE sets, or None when it is unset or not "<stage>:<step>:<file>"."""
    from guiapp.progress import PausePoint

    stage, _, rest = os.environ.get(PAUSE_VARIABLE, "").partition(":")
    step, _, release = rest.partition(":")
    return PausePoint(stage, int(step), release) if step.isdigit() and release else None

