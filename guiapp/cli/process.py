"""Process plumbing for a command: exit codes, termination signals, a deleted working folder, and output
streams whose reader has gone (`mergesmith … | head`)."""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# "<stage>:<step>:<file>" holds a job run here once (see PausePoint), e.g. "Merging:2:/tmp/go": for tests that act on
# a command mid-stage (Ctrl-C, kill). Read here only, never below the command line.
PAUSE_VARIABLE = "MERGESMITH_TEST_PAUSE"

Handler = Callable[[argparse.Namespace], int]



def stop_on_termination_signals() -> dict[int, Any]:
    """Make SIGTERM (a `kill`, a service manager stopping us) and SIGHUP (the terminal closed) end a command as
    Ctrl-C does: the job is abandoned and its staging folder removed. Returns the previous handlers by signal,
    none where signals cannot be set here."""

    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return {}
    signals = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])  # no SIGHUP on Windows
    return {signum: signal.signal(signum, interrupt) for signum in signals}


def leave_a_deleted_working_folder() -> None:
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


def print_any_text() -> None:
    """Let stdout and stderr print any text, whatever their encoding (PYTHONIOENCODING=ascii, a Latin-1 terminal):
    what the encoding cannot hold, such as a folder name's undecodable bytes, is printed as a backslash escape
    instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):  # not a text stream of a file (a test's replacement)
            continue


def output_closed() -> bool:
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


def discard_output() -> None:
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


class Diagnostics(io.TextIOBase):
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
