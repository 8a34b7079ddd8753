"""The thread policy is what guiapp/system/threads.py says: one thread for memory-bound work, the free cores (capped
by the user's limit) for compute-bound work, waiting threads that sleep; a surveyed tensor's blocks count their
models at once, one torch thread each (guiapp/compute/parallel.py). Counts, not timings."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.compute.parallel import HelperThreads
from guiapp.merging.merge import BLOCK_ELEMENTS, MergeSettings, run_merge
from guiapp.merging.methods import _task_vectors as task_vectors
from guiapp.merging.methods._selection import LargestK
from guiapp.system.threads import LoadMeter, ThreadPolicy, WorkKind, logical_cores
from tests.engine.helpers import recipe


def test_elementwise_work_always_gets_one_thread():
    policy = ThreadPolicy(busy_elsewhere=lambda: 0.0, cores=8)
    assert policy.threads_for(WorkKind.ELEMENTWISE) == 1


@pytest.mark.parametrize(("cores", "busy", "limit", "expected"), [
    (8, 0.0, None, 8),   # a quiet machine: every core
    (8, 2.2, None, 6),   # two cores taken by other programs
    (8, 2.6, None, 5),   # a core counts as taken from half busy
    (2, 1.0, None, 1),   # one busy process on a 2-core machine
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


def test_helper_threads_return_every_result_in_order_and_use_another_thread():
    caller = threading.get_ident()
    with HelperThreads(most=2) as helpers:
        assert helpers.run_each(lambda item: (item, threading.get_ident()), [0, 1, 2])[0] == (0, caller)  # width 1
        helpers.width = 2
        results = helpers.run_each(lambda item: (item * item, threading.get_ident(), torch.get_num_threads()),
                                   list(range(5)))
    assert [square for square, _, _ in results] == [0, 1, 4, 9, 16]
    assert {ident for _, ident, _ in results[0::2]} == {caller}
    assert {ident for _, ident, _ in results[1::2]} != {caller}
    assert {threads for _, ident, threads in results if ident != caller} == {1}


def test_a_failing_call_is_raised_after_every_thread_ended_its_share():
    ended = []

    def work(item: int) -> int:
        if item == 0:
            raise ValueError("the first item is bad")
        threading.Event().wait(0.2)
        ended.append(item)
        return item

    with HelperThreads(most=2) as helpers:
        helpers.width = 2
        with pytest.raises(ValueError, match="first item"):
            helpers.run_each(work, [0, 1])
        assert ended == [1]


@pytest.fixture(scope="module")
def streamed_trio(tmp_path_factory):
    """A base and two fine-tunes whose embeddings span three blocks, so TIES ranks them in passes."""
    folder = tmp_path_factory.mktemp("streamed")
    shape = LlamaShape(layers=1, vocab=BLOCK_ELEMENTS // 64 * 2 + 5)
    base = write_llama(folder / "base", shape, dtype=torch.bfloat16, seed=0)
    return base, *(write_llama_finetune(folder / name, base, seed=seed, delta_rank=None)
                   for name, seed in (("one", 1), ("two", 2)))


def _counting_threads(streamed_trio, tmp_path, policy: ThreadPolicy, monkeypatch) -> tuple[dict, bytes]:
    """({"count": the (thread, torch threads) pairs that counted the embeddings' blocks, "mix": those that mixed their
    halves}, the merged output's bytes)."""
    seen = {"count": set(), "mix": set()}
    count, sign_consensus = LargestK.count, task_vectors._sign_consensus

    def recording_count(self, scores):
        if scores.numel() > BLOCK_ELEMENTS // 2:  # a block of the embeddings, not a small tensor's
            seen["count"].add((threading.get_ident(), torch.get_num_threads()))
        count(self, scores)

    def recording_sign_consensus(weighted, *args, **kwargs):
        if weighted[0].numel() > BLOCK_ELEMENTS // 4:  # half a block of the embeddings
            seen["mix"].add((threading.get_ident(), torch.get_num_threads()))
        return sign_consensus(weighted, *args, **kwargs)

    monkeypatch.setattr(LargestK, "count", recording_count)
    monkeypatch.setattr(task_vectors, "_sign_consensus", recording_sign_consensus)
    base, one, two = streamed_trio
    text = (f"merge_method: ties\nbase_model: {base}\nmodels:\n  - model: {one}\n    parameters: "
            f"{{weight: 0.7, density: 0.4}}\n  - model: {two}\n    parameters: {{weight: 0.5, density: 0.75}}\n")
    outcome = run_merge(recipe(text), MergeSettings(tmp_path, threads=policy))
    monkeypatch.setattr(LargestK, "count", count)
    monkeypatch.setattr(task_vectors, "_sign_consensus", sign_consensus)
    assert {s["threads"] for s in outcome.tensor_stats if s["tensor"] == "model.embed_tokens.weight"} == {
        policy.threads_for(WorkKind.DENSE)}
    return seen, b"".join(p.read_bytes() for p in sorted(tmp_path.glob("*.safetensors")))


def test_streamed_ties_counts_its_models_and_mixes_its_blocks_on_the_free_cores_one_torch_thread_each(
        streamed_trio, tmp_path, monkeypatch):
    together, merged = _counting_threads(streamed_trio, tmp_path / "two", ThreadPolicy(
        busy_elsewhere=lambda: 0.0, cores=2), monkeypatch)
    for work in ("count", "mix"):
        assert len({ident for ident, _ in together[work]}) == 2, work
        assert {threads for _, threads in together[work]} == {1}, work
    alone, merged_alone = _counting_threads(streamed_trio, tmp_path / "one", ThreadPolicy(
        limit=1, busy_elsewhere=lambda: 0.0), monkeypatch)
    assert len({ident for pairs in alone.values() for ident, _ in pairs}) == 1
    assert merged == merged_alone  # the same bytes, whoever counted and mixed
    busy, _ = _counting_threads(streamed_trio, tmp_path / "busy", ThreadPolicy(
        busy_elsewhere=lambda: 1.0, cores=2), monkeypatch)
    assert len({ident for pairs in busy.values() for ident, _ in pairs}) == 1  # the other core is taken


def test_a_meter_begun_before_other_work_sleeps_only_what_is_left_of_its_first_interval(monkeypatch):
    """The rank preview begins its meter, reads its first tensors, then asks: the reading covers that time instead
    of a sleep of its own (20 ms of a 90 ms preview)."""
    from guiapp.system import threads  # noqa: PLC0415

    meter = LoadMeter(first_interval_s=0.02)
    meter.begin()
    time.sleep(0.03)  # the work done meanwhile
    slept = []
    monkeypatch.setattr(threads.time, "sleep", slept.append)
    assert 0.0 <= meter.busy_elsewhere() <= logical_cores()
    assert slept == []
    fresh = LoadMeter(first_interval_s=0.02)
    fresh.busy_elsewhere()
    assert len(slept) == 1 and 0.01 < slept[0] <= 0.02  # not begun: (nearly) the whole first interval


def test_the_first_load_reading_is_taken_while_the_merge_plans_and_opens_its_inputs(streamed_trio, tmp_path):
    # The meter's first reading waits out a short interval: taken beside the planning, not by the merge loop.
    callers = []

    def busy() -> float:
        callers.append(threading.current_thread().name)
        return 0.0

    base, one, two = streamed_trio
    text = (f"merge_method: ties\nbase_model: {base}\nmodels:\n  - model: {one}\n    parameters: "
            f"{{weight: 0.7, density: 0.4}}\n  - model: {two}\n    parameters: {{weight: 0.5, density: 0.75}}\n")
    run_merge(recipe(text), MergeSettings(tmp_path / "out", threads=ThreadPolicy(busy_elsewhere=busy, refresh_s=3600)))
    assert callers == ["mergesmith-load"]
