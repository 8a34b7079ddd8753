"""Honest time estimates: ranges rather than false precision, start-up and fixed costs counted, and
this machine's finished jobs used for the next estimate of their kind and method. How close the estimates come
to real jobs is measured by benchmarks/estimates.py, not here (it depends on the machine's speed and load)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import yaml

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.jobs import durations
from guiapp.jobs.estimates import estimate_merge
from guiapp.jobs.runner import JobStatus, run_job
from guiapp.jobs.specs import merge_job
from guiapp.merging.merge import plan_merge
from guiapp.merging.recipe import recipe_from_dict
from guiapp.system.probe import ProbeResult, Speed
from guiapp.system.resources import TimeEstimate
from guiapp.system.units import format_duration_range, format_seconds, roughly

# Two of these make a linear merge just above the size whose throughput is recorded (20 MB).
CALIBRATING = LlamaShape(hidden=256, intermediate=688, layers=2, heads=4, kv_heads=2, vocab=9000)
TINY = LlamaShape(hidden=32, intermediate=64, layers=1, heads=2, kv_heads=1, vocab=64)
MEASURED_SHARE = durations._thread_share  # before `steady_machine` pins it


@pytest.fixture(autouse=True)
def fresh_history(tmp_path, monkeypatch):
    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture(autouse=True)
def steady_machine(monkeypatch):
    """Estimates compared with each other are made at one load: the machine's, measured at each estimate, moves."""
    monkeypatch.setattr(durations, "_thread_share", lambda: 0.5)


@pytest.fixture
def probed() -> ProbeResult:
    """The speeds a probe of a modest CPU reports."""
    return ProbeResult(fingerprint={}, speeds=[Speed("cpu", "float32", "elementwise", 0.003, None, 10.0),
                                               Speed("cpu", "float32", "matmul", 0.001, 40.0, None)])


def test_durations_are_shown_as_ranges_in_one_unit():
    assert format_duration_range(50, 110) == "1–2 min"
    assert format_duration_range(4, 9) == "4–9 s"
    assert format_duration_range(12, 33) == "10–35 s"
    assert format_duration_range(0, 0.3) == "under a second"
    assert format_duration_range(0.2, 0.95) == "under a second"
    # An estimate that reaches past a second is not "under" one: the Jobs chart shades the range beside these words.
    assert format_duration_range(0.8, 1.3) == "1 s"
    assert format_duration_range(0.8, 2.2) == "1–3 s"
    assert format_duration_range(130, 170) == "2–3 min"
    assert format_duration_range(5000, 9000) == "1–3 h"


def test_sub_second_durations_are_said_in_words():
    assert roughly(0.2, 0.9) == "under a second" and roughly(4, 9) == "about 4–9 s"
    assert format_seconds(0.4) == "less than a second" and format_seconds(0) == "0 s"
    assert format_seconds(42) == "42 s"
    assert str(TimeEstimate(0.6, "test", 0.5, 0.9)) == "under a second"
    assert str(TimeEstimate(0.9, "test", 0.7, 1.2)) == roughly(0.8, 1.25) == "about 1 s"


def test_an_estimate_counts_start_up_downloads_and_work(probed):
    plain = durations.estimate_duration("merge/ties", 2_000_000_000, probed, "cpu")
    assert plain.low < plain.seconds < plain.high and str(plain).startswith("about ")
    started = durations.estimate_duration("merge/ties", 2_000_000_000, probed, "cpu", startup_seconds=4)
    assert started.seconds == pytest.approx(plain.seconds + 4)
    downloading = durations.estimate_duration("merge/ties", 2_000_000_000, probed, "cpu",
                                              download_bytes=2_000_000_000)
    assert downloading.seconds == pytest.approx(plain.seconds + 2e9 / durations.DOWNLOAD_BYTES_PER_SECOND)
    # A method that does more per byte is estimated slower than a weighted sum.
    assert durations.estimate_duration("merge/linear", 2_000_000_000, probed, "cpu").seconds < plain.seconds
    assert durations.estimate_duration("merge/ties", 1, None, "cpu") is None  # nothing to go by


def test_finished_jobs_calibrate_the_next_estimate(tmp_path, probed):
    base = write_llama(tmp_path / "base", CALIBRATING, seed=0)
    recipe = recipe_from_dict({"merge_method": "linear", "models": [
        {"model": str(write_llama_finetune(tmp_path / f"tune-{seed}", base, seed=seed)), "parameters": {"weight": 0.5}}
        for seed in (1, 2)]})
    plan = plan_merge(recipe)
    assert plan.input_bytes > 20_000_000
    before = estimate_merge(plan, "cpu", tmp_path / "out", probed).time
    assert "reference" in before.basis and durations.measured_seconds_per_byte("merge/linear") is None

    assert run_job(merge_job(recipe, tmp_path / "out")).status is JobStatus.DONE
    assert durations.measured_seconds_per_byte("merge/linear") is not None
    after = estimate_merge(plan, "cpu", tmp_path / "out-2", probed).time
    assert "earlier jobs on this machine" in after.basis
    assert after.high / after.low < before.high / before.low  # known: a narrower range


def test_outside_a_job_an_estimate_records_nothing(tmp_path, probed):
    durations.work_begins("merge/linear", 10**9)  # a dry run or the window's check, not a job
    durations.job_finished()
    assert durations.measured_seconds_per_byte("merge/linear") is None


@pytest.mark.long
def test_the_lora_commands_dry_run_prints_the_plan_and_estimate(tmp_path):
    base = write_llama(tmp_path / "base", TINY, seed=0)
    tune = write_llama_finetune(tmp_path / "tune", base, seed=1)
    adapter = tmp_path / "adapter"
    env = {**os.environ, "MERGESMITH_CACHE_DIR": str(tmp_path / "cache")}  # no probe: earlier jobs give the time
    for key in ("extract", "apply", "merge/linear"):
        durations.record_throughput(key, 5e-9)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "guiapp", *args], capture_output=True, text=True, timeout=300,
                              env=env)

    extract = run("extract-lora", "--base", str(base), "--model", str(tune), "--out", str(adapter), "--rank", "4",
                  "--dry-run")
    assert extract.returncode == 0, extract.stderr
    assert "Rank:          4" in extract.stdout and "Time: about" in extract.stdout and not adapter.exists()
    assert run("extract-lora", "--base", str(base), "--model", str(tune), "--out", str(adapter), "--rank", "4")\
        .returncode == 0
    applied = run("apply-lora", "--base", str(base), "--adapter", str(adapter), "--out", str(tmp_path / "applied"),
                  "--dry-run")
    assert applied.returncode == 0, applied.stderr
    assert "Time: about" in applied.stdout and not (tmp_path / "applied").exists()
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(yaml.safe_dump({"merge_method": "linear", "models": [
        {"model": str(base), "parameters": {"weight": 0.5}}, {"model": str(tune), "parameters": {"weight": 0.5}}]}))
    merged = run("merge", str(recipe), str(tmp_path / "merged"), "--dry-run")
    assert merged.returncode == 0 and "Time: about" in merged.stdout  # the same line, the same estimate


def test_a_busy_machine_lengthens_the_estimate_and_a_busy_job_is_recorded_at_its_quiet_rate(monkeypatch, probed):
    assert 0 < MEASURED_SHARE(0.05) <= 1.05  # measured, on this machine as it is
    monkeypatch.setattr(durations, "_thread_share", lambda: 1.0)  # a quiet machine
    quiet = durations.estimate_duration("extract", 1_000_000_000, probed, "cpu")
    assert durations.machine_slowdown() == 1.0
    # Other programs keep the cores busy: a thread of ours gets a third of one.
    monkeypatch.setattr(durations, "_thread_share", lambda: 1 / 3)
    busy = durations.estimate_duration("extract", 1_000_000_000, probed, "cpu")
    assert busy.seconds == pytest.approx(3 * quiet.seconds)
    assert "slower now" in busy.basis
    # A job that took 2.1 s while the machine was that busy took 0.7 s of a quiet one, the fixed cost included.
    durations.job_started()
    durations.work_begins("extract", 100_000_000)
    time.sleep(2.1)
    durations.job_finished()
    quiet_work = 2.1 / 3 - durations.JOB_OVERHEAD_SECONDS
    assert durations.measured_seconds_per_byte("extract") == pytest.approx(quiet_work / 100_000_000, rel=0.1)
