"""The chat-template child process (guiapp/merging/template_child.py), kept between renders.

Kept so that a Generate does not pay the child's start (about 0.7 s of CPU: it imports transformers' renderer): a
child that rendered a text in time is kept, idle, for the next render of this process. One that ran past its time,
died, answered with a problem, or was running when a job was cancelled is killed and never reused; a child ends
itself after a render that left it much larger (a kept child's memory bound counts from its start). Every child
still running when this process exits is killed, and an idle one also ends when its request pipe closes.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from guiapp.progress import Progress

_LOCK = threading.Lock()
_idle: list[tuple[int, subprocess.Popen]] = []  # at most one (the pid of the process that started it, the child)
_live: set[subprocess.Popen] = set()  # every child started and not yet ended


def render_in_child(request: bytes, seconds: float, start_seconds: float,
                    progress: Progress) -> dict[str, Any] | None:
    """The template child's answer to `request` (one JSON object), or None when its rendering ran past `seconds`
    (the child is killed). A new child has `start_seconds` for its imports before the clock starts; a kept child
    that ended while idle is replaced once. Checks `progress` for a cancel every fiftieth of a second (JobCancelled;
    the child is killed)."""
    kept = _take_idle()
    if kept is not None:
        answer, ended_before_answering = _ask(kept, False, request, seconds, start_seconds, progress)
        if not ended_before_answering:
            return answer
    return _ask(_start(), True, request, seconds, start_seconds, progress)[0]


def _ask(child: subprocess.Popen, fresh: bool, request: bytes, seconds: float, start_seconds: float,
         progress: Progress) -> tuple[dict[str, Any] | None, bool]:
    """(the answer, whether the child had ended before it could answer: it took no request or closed its output).
    The child is kept after a text, ended otherwise."""
    answer: dict[str, Any] | None = None
    try:
        if fresh and _read_line(child, start_seconds, progress) != b"ready\n":
            return _failed(child, "did not start"), False
        try:
            child.stdin.write(request + b"\n")
            child.stdin.flush()
        except OSError:  # it ended before reading
            return _failed(child, "stopped"), True
        line = _read_line(child, seconds, progress)
        if line is None:
            return None, False
        answer = _answer(line)
        return answer or _failed(child, "stopped"), line == b""
    finally:
        if answer and "text" in answer:
            _keep(child)
        else:
            _end(child)


def _answer(line: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(line)
    except ValueError:  # nothing, or not what the child writes
        return None
    return answer if isinstance(answer, dict) and answer else None


def _failed(child: subprocess.Popen, what: str) -> dict[str, Any]:
    _end(child)
    return {"problem": "failed", "message": f"its renderer {what} (exit status {child.returncode})"}


def _read_line(child: subprocess.Popen, seconds: float, progress: Progress) -> bytes | None:
    """The child's next output line (b"" when it closed its output), or None when none came within `seconds`."""
    got: list[bytes] = []

    def read() -> None:
        try:
            got.append(child.stdout.readline())
        except (OSError, ValueError):  # the child was ended and its pipe closed meanwhile
            pass

    reader = threading.Thread(target=read, name="template-child-reader", daemon=True)
    reader.start()
    if not _wait_for(lambda: not reader.is_alive(), seconds, progress):
        return None
    return got[0] if got else b""


def _wait_for(done: Callable[[], bool], seconds: float, progress: Progress) -> bool:
    """Whether `done()` became true within `seconds`, checking `progress` for a cancel meanwhile."""
    deadline = time.monotonic() + seconds
    while not done():
        progress.check_cancelled()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _start() -> subprocess.Popen:
    from guiapp.system.probe import child_environment  # noqa: PLC0415 - the probe's way to start a child

    child = subprocess.Popen([sys.executable, "-m", "guiapp.merging.template_child"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_environment())
    with _LOCK:
        _live.add(child)
    return child


def _take_idle() -> subprocess.Popen | None:
    """The idle child, if this process started one that is still running (a forked process never takes its
    parent's: the pipes are the parent's)."""
    with _LOCK:
        if not _idle:
            return None
        owner, child = _idle.pop()
    if owner == os.getpid() and child.poll() is None:
        return child
    if owner == os.getpid():
        _end(child)
    return None


def _keep(child: subprocess.Popen) -> None:
    with _LOCK:
        if not _idle:
            _idle.append((os.getpid(), child))
            return
    _end(child)  # another render kept its child first


def _end(child: subprocess.Popen) -> None:
    with _LOCK:
        _live.discard(child)
    if child.poll() is None:
        child.kill()
    child.wait()
    for pipe in (child.stdin, child.stdout):
        try:
            pipe.close()
        except OSError:
            pass


def end_idle() -> None:
    """End the idle child this process kept, if any."""
    with _LOCK:
        kept = [child for owner, child in _idle if owner == os.getpid()]
        _idle.clear()
    for child in kept:
        _end(child)


@atexit.register
def _end_all() -> None:
    """Kill every child still running: an idle one, and one rendering an endless template for a job's thread."""
    end_idle()
    with _LOCK:
        running = list(_live)
    for child in running:
        _end(child)
