"""What every fault case checks: the user's message, inputs byte-for-byte unchanged, nothing finished-looking.

A case runs a real job (`guiapp.jobs.runner.run_job`, as the window's runner and the CLI do), explains its
failure as the window would, and records (fault class, case, what the user saw) for the session's summary.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from pathlib import Path

from guiapp.jobs.runner import Job, JobResult, JobStatus, run_job
from guiapp.system.explain import Explanation, explain


@dataclass
class Seen:
    """One row of the summary: what the user saw for one case. `passed` is filled in from the test's outcome."""

    fault_class: str
    case: str
    saw: str
    nodeid: str
    passed: bool | None = None


def fingerprint(*paths: Path) -> dict[str, str]:
    """Content hashes of every file under `paths` (files or folders), to prove inputs are never modified."""
    hashes = {}
    for root in map(Path, paths):
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for file in files:
            hashes[str(file)] = hashlib.sha256(file.read_bytes()).hexdigest()
    return hashes


def leftovers(parent: Path) -> list[str]:
    """Staging or retired folders, or lock files, a job left in `parent` (the output folder's parent)."""
    if not parent.is_dir():
        return []
    return sorted(p.name for p in parent.iterdir()
                  if any(part in p.name for part in (".mergesmith-partial-", ".mergesmith-old-", ".mergesmith-lock")))


def looks_finished(folder: Path) -> bool:
    """Whether `folder` looks like a finished model or adapter: it holds weights or a config."""
    return folder.is_dir() and any(folder.glob("*.safetensors")) or (folder / "config.json").is_file() \
        or (folder / "adapter_config.json").is_file()


def headline(explanation: Explanation) -> str:
    """The explanation as the summary shows it: title, then the first line of what happened."""
    first = explanation.what.strip().splitlines()[0] if explanation.what.strip() else ""
    return f"{explanation.title}: {first}"


def fails_cleanly(job: Job, *, inputs: list[Path], out: Path | None) -> tuple[JobResult, Explanation]:
    """Run `job`, which must fail, and check the three promises; return its result and explanation.

    `out` is where the job was asked to write; it must not exist afterwards (callers whose output folder
    existed beforehand check it themselves) and its parent must hold no staging folder.
    """
    before = fingerprint(*inputs)
    result = run_job(job)
    assert result.status is JobStatus.FAILED, f"expected a failure, got {result.status}: {result.summary}"
    explanation = explain(result.error)
    assert explanation.recognised, explanation.render_text()
    assert explanation.what and explanation.fix, f"the user is not told what to do: {explanation.render_text()}"
    assert "Traceback" not in explanation.what
    assert fingerprint(*inputs) == before, "an input changed"
    if out is not None:
        assert not out.exists(), f"{out} was left behind"
        assert leftovers(out.parent) == []
    return result, explanation


def cli_explanation(stderr: str) -> tuple[str, str]:
    """The explanation's title and what happened (its wrapped lines joined), as the CLI printed them."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    # A first word too long for the line (a long path) puts the label on a line of its own.
    start = next(i for i, line in enumerate(lines) if line.startswith("What happened:"))
    what = [lines[start].removeprefix("What happened:").strip()]
    what += [line.strip() for line in itertools.takewhile(lambda line: line.startswith("  "), lines[start + 1:])]
    return lines[start - 1], " ".join(what).strip()
