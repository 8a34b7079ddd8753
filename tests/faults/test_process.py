"""Fault class "process": cancels at random points, `kill -9` of a CLI merge, closing the window mid-job."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import yaml
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.cli.process import PAUSE_VARIABLE
from guiapp.errors import JobCancelled
from guiapp.jobs.history import load_history
from guiapp.jobs.runner import JobListeners, JobStatus, run_job
from guiapp.jobs.specs import merge_job
from guiapp.merging.recipe import parse_recipe
from guiapp.progress import CancelToken
from tests.faults.harness import fingerprint, leftovers, looks_finished
from tests.ui.conftest import isolated_settings, make_window, window  # noqa: F401 - the window

CANCELS = 20
# Big enough that the output spans several 20 MB shards, so a kill lands between shards.
SLOW = LlamaShape(hidden=512, intermediate=2048, layers=8, heads=8, kv_heads=2, vocab=32000)


def _ties(trio) -> str:
    return (f"merge_method: ties\nbase_model: {trio.base}\nmodels:\n"
            f"  - model: {trio.one}\n    parameters: {{weight: 0.5, density: 0.5}}\n"
            f"  - model: {trio.two}\n    parameters: {{weight: 0.5, density: 0.5}}\n")


@pytest.mark.long
def test_cancel_at_random_points(trio, tmp_path, seen):
    """Count a whole job's progress events, then cancel twenty jobs each at a random one of them."""
    events = []
    reference = run_job(merge_job(parse_recipe(_ties(trio)), tmp_path / "reference"),
                        JobListeners(on_event=lambda job, event: events.append(event.stage)))
    assert reference.status is JobStatus.DONE
    inputs = [trio.base, trio.one, trio.two]
    before = fingerprint(*inputs)
    picks = random.Random(8).sample(range(len(events)), min(CANCELS, len(events)))
    outcomes = []
    for attempt, at in enumerate(picks):
        token = CancelToken()
        count = []

        def cancel_at(job, event, at=at, token=token, count=count):
            count.append(event)
            if len(count) == at + 1:
                token.cancel()

        out = tmp_path / f"out-{attempt}"
        result = run_job(merge_job(parse_recipe(_ties(trio)), out), JobListeners(on_event=cancel_at), token)
        outcomes.append((events[at], result.status))
        if result.status is JobStatus.CANCELLED:
            assert not out.exists(), f"cancelled at event {at} ({events[at]}) but {out} exists"
        else:  # a cancel after the last check: the job finished, and its output is whole
            assert result.status is JobStatus.DONE and (out / "model.safetensors").is_file()
        assert leftovers(tmp_path) == []
    assert fingerprint(*inputs) == before
    cancelled = [stage for stage, status in outcomes if status is JobStatus.CANCELLED]
    assert len(cancelled) >= CANCELS * 3 // 4, outcomes
    final = run_job(merge_job(parse_recipe(_ties(trio)), tmp_path / "after"))
    assert final.status is JobStatus.DONE  # the next job works
    stages = ", ".join(sorted(set(cancelled)))
    seen("process", f"cancel at {len(picks)} random points ({len(cancelled)} landed; stages: {stages})",
         f"Cancelled: {JobCancelled().message}")


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory) -> Path:
    return write_llama(tmp_path_factory.mktemp("slow") / "model", SLOW, dtype=torch.float32, seed=0)


def _cli(*args, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A real `mergesmith` program (not a warm child, tests/support/warm_cli.py): `kill -9` ends what the user
    runs, nothing a test helper set up around it."""
    return subprocess.Popen([sys.executable, "-m", "guiapp", *map(str, args)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


@pytest.mark.long
def test_kill_9_of_a_cli_merge_midway(slow_model, tmp_path, warm_cli, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(f"merge_method: ties\nbase_model: {slow_model}\nmodels:\n  - model: {slow_model}\n"
                      f"    parameters: {{weight: 1, density: 0.5}}\n")
    before = fingerprint(slow_model, recipe)
    out = tmp_path / "merged"
    # Held after its 40th tensor (of 75) until killed, so the kill lands midway however fast the machine is.
    process = _cli("merge", recipe, out, "--out-shard-size", "20MB",
                   env={PAUSE_VARIABLE: f"Merging:40:{tmp_path / 'never-released'}"})
    for line in process.stderr:
        if line.startswith("Paused after step 40 of Merging"):
            break
    assert process.poll() is None, "the merge ended before it could be killed"
    staging = tmp_path.glob(".merged.mergesmith-partial-*/*.safetensors")
    assert len(list(staging)) >= 2  # the first shards are written, the next one is open
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    process.stderr.close()
    staged = [name for name in leftovers(tmp_path) if not name.endswith(".mergesmith-lock")]  # lock: next start
    assert staged and all(f".mergesmith-partial-{process.pid}-" in name for name in staged)
    assert any((tmp_path / name).iterdir() for name in staged)  # it had started writing
    assert not out.exists() and not looks_finished(out)
    assert fingerprint(slow_model, recipe) == before

    # The next start (another process): any job writing next to it removes the dead process's staging folder.
    again = warm_cli.run(["merge", str(recipe), str(tmp_path / "second"), "--out-shard-size", "20MB"], timeout=180)
    assert again.returncode == 0, again.stderr
    assert leftovers(tmp_path) == [] and not out.exists() and looks_finished(tmp_path / "second")
    seen("process", "kill -9 of a CLI merge midway, then the next start",
         f"(killed: no message possible) {len(staged)} staging folder, removed by the next job; "
         f"no {out.name} folder")


def test_closing_the_window_during_a_job(qtbot, window, models, tmp_path, seen):
    recipe = {"merge_method": "della", "base_model": str(models.medium_base),
              "models": [{"model": str(models.medium_a), "parameters": {"weight": 0.5, "density": 0.5}},
                         {"model": str(models.medium_b), "parameters": {"weight": 0.5, "density": 0.5}}]}
    inputs = [models.medium_base, models.medium_a, models.medium_b]
    before = fingerprint(*inputs)
    window.merge.yaml_edit.setPlainText(yaml.safe_dump(recipe, sort_keys=False))
    window.merge.output_edit.setText(str(tmp_path / "closing"))
    merging = []
    window.state.jobs.progress.connect(lambda key, event: merging.append(event.stage == "Merging" and event.done))
    record = window.state.jobs.record(window.merge.run())
    qtbot.waitUntil(lambda: record.status == "running" and any(merging), timeout=30_000)  # mid-merge
    asked = []

    def quit_anyway():
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            asked.append(box.text())
            box.button(QMessageBox.StandardButton.Yes).click()
        else:
            QTimer.singleShot(50, quit_anyway)

    QTimer.singleShot(50, quit_anyway)
    window.close()
    assert not window.isVisible() and asked
    assert not (tmp_path / "closing").exists() and leftovers(tmp_path) == []
    assert fingerprint(*inputs) == before
    assert load_history()[-1].status == "cancelled"
    seen("process", "closing the window during a merge", f"A job is still running: {asked[0].splitlines()[0]}")


def test_the_window_deleted_while_a_check_runs_in_the_background(qtbot, probed, models, seen, monkeypatch):
    """The Merge page checks a recipe on a worker thread; its answer must not reach widgets that are gone.

    The real check is held on its thread until the window has been deleted, then let go, so its answer always
    arrives late."""
    from shiboken6 import isValid  # noqa: PLC0415

    from guiapp.jobs.validation import check_merge  # noqa: PLC0415
    from guiapp.ui import background  # noqa: PLC0415
    from guiapp.ui.app import create_window  # noqa: PLC0415

    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    pool = background._POOL

    class HeldPool:
        """The UI's worker pool, holding the recipe check on its thread until the test lets go. Other background
        calls go through: holding one of those (the library listing its folders, still under way on a loaded
        machine) left the check unstarted, and the held call failed a later test a minute on."""

        def submit(self, function):
            if getattr(function, "func", None) is not check_merge:
                return pool.submit(function)

            def held():
                started.set()
                assert release.wait(60), "the test never let the check go"
                try:
                    return function()
                finally:
                    finished.set()

            return pool.submit(held)

    _, window = create_window([])  # not handed to qtbot, which would close it again after it is deleted
    window.show()
    window.state.start_loading(probe=False)
    qtbot.waitUntil(lambda: window.state.methods is not None, timeout=60_000)
    window.state.set_probe(probed)
    monkeypatch.setattr(background, "_POOL", HeldPool())  # from here on, background calls wait for release
    validator = window.merge._validator
    recipe = {"merge_method": "ties", "base_model": str(models.medium_base),
              "models": [{"model": str(models.medium_a), "parameters": {"weight": 0.5, "density": 0.5}}]}
    window.merge.yaml_edit.setPlainText(yaml.safe_dump(recipe, sort_keys=False))
    qtbot.waitUntil(started.is_set, timeout=30_000)  # the check runs on its thread
    check = validator.task  # the page's coroutine, waiting for the check's answer
    window.close()
    window.deleteLater()
    qtbot.waitUntil(lambda: not isValid(validator), timeout=30_000)  # the page and its widgets are gone
    qtbot.waitUntil(check.cancelled, timeout=30_000)  # deleting the page cancelled its coroutine
    release.set()
    # The check's thread finishes now and its answer is dropped; pytest-qt fails the test on any exception raised
    # in Qt's loop (the window's coroutines hand theirs to sys.excepthook).
    qtbot.waitUntil(finished.is_set, timeout=60_000)
    qtbot.wait(200)
    seen("process", "the window deleted while a recipe check runs", "(nothing: the late answer is dropped)")
