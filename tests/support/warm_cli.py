"""`mergesmith ARGS` in a fresh process per case without paying for torch's import each time: a warm "zygote".

The fault cases that only read the CLI's message and exit code spent 3-4 s per case importing torch in a new
`python -m guiapp`. Here one process (the zygote, `python -m tests.support.warm_cli`) imports torch and
Mergesmith's CLI once; for each case it forks a child that takes on the case's environment, working folder,
stdin/stdout/stderr files and address-space limit (RLIMIT_AS), then runs `guiapp`'s `__main__` as
`python -m guiapp` does and exits with its code (after what the interpreter's exit does that a case can see:
threads joined, atexit handlers run, output flushed). The test side keeps the hang timeout: a
child still running then is killed with its process group, and `subprocess.TimeoutExpired` is raised as
`subprocess.run` would.

What the fork inherits, and why it is the same as a new process for these cases:
- Only modules that read no environment at import are imported ahead: huggingface_hub reads HF_ENDPOINT, HF_HOME
  and friends when imported, so it must be imported by the child, after the case's environment is in place (the
  zygote refuses to start if one of its imports pulled it in). Mergesmith reads its own variables (MERGESMITH_*)
  when it needs them, never at import.
- No thread may run when a process forks (a lock held by another thread stays locked in the child for ever):
  importing torch starts no thread pool of its own (its OpenMP/intra-op pools start with the first parallel
  operation, which the zygote never runs), but numpy's OpenBLAS starts its worker threads at import, so the
  zygote runs with OPENBLAS_NUM_THREADS=1 (no worker) and checks before every fork that it has one thread.
Cases that need something a fork cannot give keep `subprocess` (signals to a real `mergesmith` process, a umask
or a user namespace in force before anything is imported): see their tests.
"""

from __future__ import annotations

import atexit
import gc
import io
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the checkout: where `tests` is importable from
# Imported once in the zygote: torch and everything of Mergesmith's that a CLI job uses and that leaves
# huggingface_hub unimported (see the module's docstring).
WARM_IMPORTS = ("torch", "safetensors.torch", "yaml", "regex", "guiapp.cli.main", "guiapp.jobs.runner",
                "guiapp.jobs.specs", "guiapp.jobs.history", "guiapp.jobs.estimates", "guiapp.merging.merge",
                "guiapp.merging.methods", "guiapp.lora.extract", "guiapp.lora.apply",
                "guiapp.system.explain")
READS_ENVIRONMENT_AT_IMPORT = ("huggingface_hub", "transformers", "peft")


class WarmCli:
    """A running zygote: `run()` is `subprocess.run([python, -m, guiapp, ...])`, without the start-up cost.

    Start it with `WarmCli()` and end it with `close()` (or use it as a context manager). It runs one case at a
    time: call `run()` from one thread. Raises RuntimeError when the zygote cannot start or dies; a case's own
    failure is only ever in the returned exit code and output.
    """

    def __init__(self) -> None:
        self._files = tempfile.TemporaryDirectory(prefix="mergesmith-warm-cli-")
        self._log = Path(self._files.name) / "zygote.log"
        environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        with self._log.open("w") as log:
            self._process = subprocess.Popen([sys.executable, "-m", "tests.support.warm_cli"], cwd=ROOT,
                                             env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=log, bufsize=0)
        self._replies = b""
        self._cases = 0
        ready = self._reply(timeout=600)
        if ready.get("ready") is not True:
            raise RuntimeError(f"the warm CLI did not start: {ready}")

    def __enter__(self) -> WarmCli:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """End the zygote (its stdin closes, it exits) and remove its output files."""
        if self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process.stdout.close()
        self._files.cleanup()

    def run(self, args: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
            cwd: Path | str | None = None, stdin: str | None = None, address_space: int | None = None,
            code: str | None = None, started: Callable[[int], None] | None = None) -> subprocess.CompletedProcess:
        """`python -m guiapp ARGS` (or `python -c CODE` when `code` is given) in a forked child.

        `env` defaults to this process's environment now, `cwd` to its working folder, as for subprocess.run.
        `address_space` sets RLIMIT_AS in the child. `started(pid)` is called once the child runs. Returns the exit
        code (negative: killed by that signal) and what the child wrote on stdout and stderr, as text. Raises subprocess.TimeoutExpired after killing the
        child (and any process it started) when it runs longer than `timeout` seconds.
        """
        self._cases += 1
        files = Path(self._files.name) / str(self._cases)
        files.mkdir()
        stdin_file = files / "stdin"
        stdin_file.write_text(stdin or "", encoding="utf-8")
        command = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "guiapp", *args]
        self._send({"argv": list(args), "code": code, "env": dict(os.environ if env is None else env),
                    "cwd": str(cwd or os.getcwd()), "stdin": str(stdin_file), "stdout": str(files / "stdout"),
                    "stderr": str(files / "stderr"), "address_space": address_space})
        child = self._reply(timeout=60)["pid"]
        if started is not None:
            started(child)
        try:
            ended = self._reply(timeout=timeout)
        except TimeoutError:
            try:
                os.killpg(child, signal.SIGKILL)  # the child leads its own group: whatever it started goes too
            except ProcessLookupError:
                pass
            self._reply(timeout=60)  # the zygote reaps it and reports
            raise subprocess.TimeoutExpired(command, timeout, *self._output(files)) from None
        stdout, stderr = self._output(files)
        return subprocess.CompletedProcess(command, ended["returncode"], stdout, stderr)

    @staticmethod
    def _output(files: Path) -> tuple[str, str]:
        return tuple((files / name).read_text(encoding="utf-8", errors="replace") for name in ("stdout", "stderr"))

    def _send(self, request: dict) -> None:
        if self._process.poll() is not None:
            self._died()
        self._process.stdin.write(json.dumps(request).encode() + b"\n")
        self._process.stdin.flush()

    def _reply(self, *, timeout: float) -> dict:
        """The zygote's next answer line; TimeoutError when none came within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._replies:  # read by hand: a buffered reader would hide a second line from select
            readable, _, _ = select.select([self._process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not readable:
                raise TimeoutError(f"no answer from the warm CLI within {timeout} s")
            chunk = os.read(self._process.stdout.fileno(), 65536)
            if not chunk:
                self._died()
            self._replies += chunk
        line, self._replies = self._replies.split(b"\n", 1)
        return json.loads(line)

    def _died(self) -> None:
        raise RuntimeError(f"the warm CLI ended (exit {self._process.wait()}): {self._log.read_text()[-2000:]}")


_shared: WarmCli | None = None


def shared() -> WarmCli:
    """This test process's one warm CLI, started on first use (one torch import) and ended when the process exits.
    Raises RuntimeError, as WarmCli() does, when it cannot start."""
    global _shared
    if _shared is None:
        _shared = WarmCli()
        atexit.register(_shared.close)
    return _shared


@pytest.fixture(scope="session")
def warm_cli() -> Iterator[WarmCli]:
    """`mergesmith ARGS` in a fresh (forked) process per case, torch imported once: `warm_cli.run(args, ...)`.
    The process's one (`shared`), which the CLI helpers of other folders use too. A conftest.py takes it with
    `from tests.support.warm_cli import warm_cli  # noqa: F401`."""
    yield shared()


# --- the zygote's side ----------------------------------------------------------------------------------------


def _serve() -> None:
    """Read one case per line on stdin, fork a child for it, answer its pid and then its exit code."""
    for name in WARM_IMPORTS:
        __import__(name)
    early = [name for name in READS_ENVIRONMENT_AT_IMPORT if name in sys.modules]
    if early:
        raise SystemExit(f"warm CLI: {early} imported by {WARM_IMPORTS}; they read the environment at import")
    gc.freeze()  # the imported objects stay out of the children's collections, so their pages stay shared
    replies = sys.stdout
    _answer(replies, {"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            raise SystemExit(f"warm CLI: {threads} threads before fork; a fork copies their locks held")
        pid = os.fork()
        if pid == 0:
            try:
                _become_the_case(request)  # ends the process with the case's exit code
            finally:
                os._exit(70)  # a case that could not be set up: never back into this loop as a second zygote
        try:
            os.setpgid(pid, pid)  # as the child does: whichever runs first, the group exists before the pid is sent
        except OSError:  # the child already did it (and may have started a program since)
            pass
        _answer(replies, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _answer(replies, {"returncode": os.waitstatus_to_exitcode(status)})


def _answer(replies: io.TextIOBase, message: dict) -> None:
    replies.write(json.dumps(message) + "\n")
    replies.flush()


def _become_the_case(request: dict) -> None:
    """In the forked child: take on the case's process state, run it, and end this process with its exit code."""
    os.setpgid(0, 0)
    if request["address_space"] is not None:
        import resource  # noqa: PLC0415 - only the child limits itself

        resource.setrlimit(resource.RLIMIT_AS, (request["address_space"],) * 2)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, mode in ((0, request["stdin"], os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
                           (2, request["stderr"], os.O_WRONLY | os.O_CREAT)):
        opened = os.open(path, mode, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    # New streams on the new descriptors, set up as Python sets them up for files (block-buffered stdout).
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                                       closefd=False, buffering=1)
    try:
        if request["code"] is not None:
            sys.argv = ["-c"]
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the test's
        else:
            sys.argv = [str(Path(sys.modules["guiapp"].__file__).parent / "__main__.py"), *request["argv"]]
            runpy.run_module("guiapp", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop)
    except BaseException:  # noqa: BLE001 - what Python does with an uncaught exception: print it, exit 1
        sys.excepthook(*sys.exc_info())
        code = 1
    _exit(code)


def _exit_code(stop: SystemExit) -> int:
    """The exit status Python gives `raise SystemExit(value)`: None is 0, a number itself, anything else printed."""
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code & 0xFF
    print(stop.code, file=sys.stderr)
    return 1


def _exit(code: int) -> None:
    """End the child as the interpreter's exit does (threads joined, atexit handlers, streams flushed), except
    for tearing down every module: that writes to each page of the zygote's heap shared with the child, which
    copies them all (1-2 s a case) and shows nothing a case checks."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # noqa: SLF001 - the handlers the interpreter's exit would run
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed stream: the interpreter's exit ignores these too
            pass
    os._exit(code)


if __name__ == "__main__":
    _serve()
