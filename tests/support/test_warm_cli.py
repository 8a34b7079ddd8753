"""The warm CLI (tests/support/warm_cli.py) gives the fault cases what `subprocess.run` gave them: a process of the
case's own, with its environment, folder, input and limits, its exit code and output, and a hang timeout that
really ends it."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.warm_cli import WarmCli


@pytest.fixture(scope="module")
def warm() -> Iterator[WarmCli]:
    with WarmCli() as cli:
        yield cli


def test_a_case_gets_its_own_process_environment_folder_and_input(warm, tmp_path):
    script = textwrap.dedent("""
        import os, sys
        print(os.getpid(), os.environ["CASE_VALUE"], os.getcwd(), sys.stdin.read().strip())
        print("to stderr", file=sys.stderr)
        raise SystemExit(3)
    """)
    done = warm.run([], code=script, env={**os.environ, "CASE_VALUE": "seen"}, cwd=tmp_path, stdin="typed\n",
                    timeout=60)
    pid, value, folder, typed = done.stdout.split()
    assert done.returncode == 3 and int(pid) != os.getpid()
    assert (value, folder, typed) == ("seen", str(tmp_path), "typed") and done.stderr == "to stderr\n"
    again = warm.run([], code="import os; print(os.environ.get('CASE_VALUE'), os.getpid())", timeout=60)
    assert again.stdout.split()[0] == "None" and again.stdout.split()[1] != pid  # nothing left from the last case


def test_the_cli_runs_as_python_m_guiapp(warm, tmp_path):
    done = warm.run(["merge", str(tmp_path / "missing.yml"), str(tmp_path / "out")], timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "missing.yml" in done.stderr
    assert warm.run(["--version"], timeout=60).stdout.startswith("mergesmith ")


def test_huggingface_hub_reads_the_cases_environment(warm):
    """huggingface_hub reads HF_ENDPOINT when imported: the child imports it, not the warm process."""
    endpoint = "http://127.0.0.1:9"
    done = warm.run([], code="from huggingface_hub import constants; print(constants.ENDPOINT)",
                    env={**os.environ, "HF_ENDPOINT": endpoint}, timeout=60)
    assert done.stdout.strip() == endpoint, done.stderr


def test_the_address_space_limit_applies(warm):
    done = warm.run([], code="buffer = bytearray(3_000_000_000)", address_space=1_500_000_000, timeout=60)
    assert done.returncode == 1 and "MemoryError" in done.stderr


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a killed one not yet reaped is a zombie, state Z: not running)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.long
def test_a_hang_is_ended_with_everything_it_started(warm, tmp_path):
    started = tmp_path / "grandchild.pid"
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(started)!r}, "w").write(str(grandchild.pid))
        time.sleep(600)
    """)
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run([], code=script, timeout=5)  # the case writes the pid at once: forked, it imports nothing
    grandchild = int(started.read_text())
    deadline = time.monotonic() + 60  # a generous bound for the kernel to deliver SIGKILL, not a speed check
    while _running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(grandchild), "a process started by the hanging case outlived it"
    assert warm.run(["--version"], timeout=60).returncode == 0  # the warm process serves the next case
