"""The chat-template child process (guiapp/merging/template_child.py), kept between renders.

Starting one costs about 0.7 s of CPU (it imports transformers' renderer), which every Generate paid again; a
child that answered in time is kept, idle, for the next render of this process. One that ran past its time, died,
gave no answer, or was running when a job was cancelled is killed and never reused. An idle child ends when this
process does (its request pipe closes).
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


def render_in_child(request: bytes, seconds: float, start_seconds: float,
                    progress: Progress) -> dict[str, Any] | None:
    """The template child's answer to `request` (one JSON object), or None when its rendering ran past `seconds`
    (the child is killed). A new child has `start_seconds` for its imports before the clock starts. Checks
    `progress` for a cancel every fiftieth of a second (JobCancelled; the child is killed)."""
    child = _take_idle()
    fresh = child is None
    if fresh:
        child = _start()
    answer = None
    try:
        if fresh and _read_line(child, start_seconds, progress) != b"ready\n":
            return _failed(child, "did not start")
        try:
            child.stdin.write(request.replace(b"\n", b" ") + b"\n")
            child.stdin.flush()
        except OSError:  # it died before reading
            return _failed(child, "stopped")
        line = _read_line(child, seconds, progress)
        if line is None:
            return None
        answer = _answer(line)
        return answer or _failed(child, "stopped")
    finally:
        if answer:
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
    reader = threading.Thread(target=lambda: got.append(child.stdout.readline()), name="template-child-reader",
                              daemon=True)
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

    return subprocess.Popen([sys.executable, "-m", "guiapp.merging.template_child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_environment())


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
    if child.poll() is None:
        child.kill()
    child.wait()
    for pipe in (child.stdin, child.stdout):
        try:
            pipe.close()
        except OSError:
            pass


@atexit.register
def end_idle() -> None:
    """End the idle child this process kept, if any (at exit, its pipe would end it too)."""
    with _LOCK:
        kept = [child for owner, child in _idle if owner == os.getpid()]
        _idle.clear()
    for child in kept:
        _end(child)
