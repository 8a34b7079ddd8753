"""The `mergesmith` entry point itself: version, usage errors, and a window that cannot open."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from guiapp.engine.samples import LlamaShape, write_llama
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - the test Hub for the pipe tests


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "guiapp", *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_version_and_usage():
    version = _run("--version")
    assert version.returncode == 0 and version.stdout.startswith("mergesmith ")
    assert _run("no-such-command").returncode == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the display check is Linux's")
def test_without_a_display_the_window_explains_instead_of_crashing():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    result = _run(env=env)
    assert result.returncode == 1
    assert "needs a desktop session" in result.stderr and "mergesmith --help" in result.stderr


def _screen_rows(text: str, columns: int) -> int:
    """How many rows a terminal `columns` wide advances while showing `text`: a newline, or a character written
    past the last column (the terminal wraps it onto a new row)."""
    rows, column = 0, 0
    for character in text:
        if character == "\r":
            column = 0
        elif character == "\n":
            rows, column = rows + 1, 0
        else:
            if column == columns:
                rows, column = rows + 1, 0
            column += 1
    return rows


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses a Linux pseudo-terminal")
def test_progress_fits_an_80_column_terminal(tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with subprocess.Popen([sys.executable, "-m", "guiapp", "demo", "--out", str(tmp_path)],
                          stdin=follower, stdout=follower, stderr=follower) as process:
        os.close(follower)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        assert process.wait(timeout=300) == 0
    os.close(leader)
    text = output.decode()
    merging = text[text.index("\rMerging"):text.index("Done:")]
    assert "21/21" in merging
    # 22 redraws (0/21 … 21/21) on one row, closed by one newline before the summary.
    assert _screen_rows(merging, 80) == 1, merging
    assert all(len(redraw) < 80 for redraw in merging.strip().split("\r"))


def _run_into_a_closed_pipe(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with stdout a pipe whose reading end is already closed (`… | head` once head has exited)."""
    reading, writing = os.pipe()
    os.close(reading)
    with subprocess.Popen([sys.executable, "-m", "guiapp", *args], stdout=writing, stderr=subprocess.PIPE,
                          env=env) as process:
        os.close(writing)
        stderr = process.stderr.read().decode()
        return process.wait(timeout=120), stderr


def test_a_closed_pipe_ends_quietly(hub_env, tmp_path):
    model = write_llama(tmp_path / "model", LlamaShape(hidden=16, intermediate=32, layers=1, heads=2, kv_heads=1,
                                                       vocab=32), seed=0)
    for index in range(30):
        hub_env.server.add_model(f"org/model-{index}", model)
    env = {**hub_env.env, "MERGESMITH_CACHE_DIR": str(tmp_path / "cache")}
    for command in (("hub", "search", "--json", "--limit", "30"),
                    ("explain", "RuntimeError: \"svd_cuda_gesvdj\" not implemented for 'BFloat16'")):
        code, stderr = _run_into_a_closed_pipe(*command, env=env)
        assert (code, stderr) == (0, ""), command
    assert not (tmp_path / "cache" / "last-error.txt").exists()


def test_an_unreachable_hub_is_named_by_its_address(tmp_path):
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = {**os.environ, "HF_ENDPOINT": endpoint, "MERGESMITH_CACHE_DIR": str(tmp_path / "cache")}
    result = _run("hub", "info", "org/model", env=env)
    assert result.returncode == 1
    assert endpoint in result.stderr and "huggingface.co" not in result.stderr
