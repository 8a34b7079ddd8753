"""The thread policy is what guiapp/system/threads.py says: one thread for memory-bound work, the free cores (capped
by the user's limit) for compute-bound work, waiting threads that sleep. Counts, not timings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from guiapp.engine.merge import MergeSettings, run_merge
from guiapp.system.threads import LoadMeter, ThreadPolicy, WorkKind, logical_cores
from tests.engine.helpers import recipe


def test_elementwise_work_always_gets_one_thread():
    policy = ThreadPolicy(busy_elsewhere=lambda: 0.0, cores=8)
    assert policy.threads_for(WorkKind.ELEMENTWISE) == 1


@pytest.mark.parametrize(("cores", "busy", "limit", "expected"), [
    (8, 0.0, None, 8),   # a quiet machine: every core
    (8, 2.2, None, 6),   # two cores taken by other programs
    (8, 2.6, None, 5),   # a core counts as taken from half busy
    (2, 1.0, None, 1),   # the case: one busy process on a 2-core machine
    (2, 7.0, None, 1),   # never fewer than one
    (8, 0.0, 3, 3),      # the user's limit
    (4, 0.0, 16, 4),     # a limit above the cores changes nothing
])
def test_dense_work_gets_the_free_cores_within_the_limit(cores, busy, limit, expected):
    policy = ThreadPolicy(limit=limit, busy_elsewhere=lambda: busy, cores=cores)
    assert policy.threads_for(WorkKind.DENSE) == expected


def test_the_load_is_measured_at_most_once_per_refresh():
    readings = []

    def busy() -> float:
        readings.append(1)
        return 0.0

    policy = ThreadPolicy(busy_elsewhere=busy, refresh_s=3600, cores=4)
    for _ in range(100):
        policy.threads_for(WorkKind.DENSE)
    assert len(readings) == 1


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="1 or more"):
        ThreadPolicy(limit=0)


def test_the_load_meter_reads_a_non_negative_number_of_cores():
    meter = LoadMeter(first_interval_s=0.01)
    for _ in range(3):
        assert 0.0 <= meter.busy_elsewhere() <= logical_cores()


def test_one_tick_of_the_counters_in_a_short_interval_is_not_read_as_many_cores(monkeypatch):
    """A full-suite run beside another read more cores than the machine has from back-to-back readings: the CPU
    counters advance in 10 ms ticks, so one tick over 0.1 ms is 100 cores. Fed counter readings like those."""
    readings = iter([(0.0, 50.0, 1.0), (0.2, 50.2, 1.1), (0.2001, 50.21, 1.1), (0.5, 50.5, 1.2)])
    meter = LoadMeter(first_interval_s=0.0)
    monkeypatch.setattr(meter, "_sample", lambda: next(readings))
    first = meter.busy_elsewhere()  # 0.2 s: 0.2 s busy, 0.1 s of it ours
    assert first == pytest.approx(0.5)
    assert meter.busy_elsewhere() == first  # 0.1 ms later: one tick of another CPU is not 100 cores
    assert meter.busy_elsewhere() == pytest.approx(min(logical_cores(), (0.3 - 0.1) / 0.3))


def _threads_per_tensor(llama_trio, tmp_path, method: str, policy: ThreadPolicy) -> dict[str, int]:
    base, one, two = llama_trio
    weights = "{weight: 0.5, density: 0.5}" if method == "ties" else "{weight: 0.5}"
    text = (f"merge_method: {method}\nbase_model: {base}\nmodels:\n"
            f"  - model: {one}\n    parameters: {weights}\n  - model: {two}\n    parameters: {weights}\n")
    outcome = run_merge(recipe(text), MergeSettings(tmp_path / method, threads=policy))
    return {s["tensor"]: s["threads"] for s in outcome.tensor_stats}


def test_an_elementwise_merge_computes_on_one_thread(llama_trio, tmp_path):
    threads = _threads_per_tensor(llama_trio, tmp_path, "task_arithmetic",
                                  ThreadPolicy(busy_elsewhere=lambda: 0.0, cores=2))
    assert threads and set(threads.values()) == {1}


def test_ties_computes_on_the_free_cores_and_obeys_the_limit(llama_trio, tmp_path):
    cores = logical_cores()
    quiet = _threads_per_tensor(llama_trio, tmp_path / "quiet", "ties", ThreadPolicy(busy_elsewhere=lambda: 0.0))
    weights = {name: n for name, n in quiet.items() if "norm" not in name}
    assert set(weights.values()) == {cores}
    limited = _threads_per_tensor(llama_trio, tmp_path / "limited", "ties",
                                  ThreadPolicy(limit=1, busy_elsewhere=lambda: 0.0))
    assert set(limited.values()) == {1}


def test_the_merge_leaves_the_callers_thread_count_as_it_was(llama_trio, tmp_path):
    import torch

    before = torch.get_num_threads()
    _threads_per_tensor(llama_trio, tmp_path, "ties", ThreadPolicy(limit=1, busy_elsewhere=lambda: 0.0))
    assert torch.get_num_threads() == before


def test_importing_mergesmith_makes_waiting_openmp_threads_sleep():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = "import os, guiapp, torch; print(os.environ['OMP_WAIT_POLICY'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "PASSIVE"
