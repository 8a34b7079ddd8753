"""The background runner: jobs run one at a time off the calling thread, report progress, cancel cleanly."""

from __future__ import annotations

import threading

from guiapp.jobs.runner import Job, JobListeners, JobRunner, JobStatus
from guiapp.progress import Progress


def _counting_job(title: str, steps: int, started: threading.Event | None = None, gate: threading.Event | None = None):
    def work(progress: Progress):
        progress.start_stage("Counting", total=steps)
        for step in range(steps):
            if started is not None and step == 0:
                started.set()
            if gate is not None:
                gate.wait(5)
            progress.step(f"step {step}")
        return {"counted": steps}

    return Job(title=title, kind="test", spec={"steps": steps}, work=work)


def test_jobs_run_in_order_off_thread_and_cancel_between_steps():
    runner = JobRunner()
    results, threads, events = [], [], []
    done = threading.Event()
    started, gate = threading.Event(), threading.Event()

    def on_done(result):
        results.append(result)
        threads.append(threading.current_thread().name)
        if len(results) == 3:
            done.set()

    listeners = JobListeners(on_event=lambda job, event: events.append((job.title, event.done)), on_done=on_done)
    slow = runner.submit(_counting_job("slow", 100, started, gate), listeners)
    queued = runner.submit(_counting_job("queued", 3), listeners)
    runner.submit(_counting_job("last", 3), listeners)
    assert started.wait(5)
    runner.cancel(slow.id)
    runner.cancel(queued.id)
    gate.set()
    assert done.wait(10)
    runner.shutdown(5)

    by_title = {r.job.title: r for r in results}
    assert [r.job.title for r in results] == ["slow", "queued", "last"]
    assert by_title["slow"].status is JobStatus.CANCELLED and by_title["queued"].status is JobStatus.CANCELLED
    assert by_title["last"].status is JobStatus.DONE and by_title["last"].summary == {"counted": 3}
    assert ("queued", 1) not in events  # cancelled before it started: it never ran
    assert max(done for title, done in events if title == "slow") < 100
    assert set(threads) == {"mergesmith-jobs"}


def test_a_failing_job_is_a_result_not_a_crash():
    def work(progress):
        raise ValueError("broken on purpose")

    runner = JobRunner()
    finished = threading.Event()
    outcome = []
    runner.submit(Job("boom", "test", {}, work), JobListeners(on_done=lambda r: (outcome.append(r), finished.set())))
    assert finished.wait(5)
    runner.shutdown(5)
    assert outcome[0].status is JobStatus.FAILED
    assert isinstance(outcome[0].error, ValueError) and "broken on purpose" in outcome[0].traceback


def test_a_job_is_held_only_where_its_runner_says_never_by_the_environment(tmp_path, monkeypatch):
    from guiapp.cli.process import PAUSE_VARIABLE
    from guiapp.jobs.runner import run_job
    from guiapp.progress import PausePoint

    monkeypatch.setenv(PAUSE_VARIABLE, f"Counting:1:{tmp_path / 'never-released'}")  # any user can set it
    result = run_job(_counting_job("free", 3))
    assert result.status is JobStatus.DONE and not any(line.startswith("Paused") for line in result.log)

    release = tmp_path / "go"
    holding = threading.Timer(0.3, release.touch)
    holding.start()
    held = run_job(_counting_job("held", 3), pause_at=PausePoint("Counting", 2, str(release)))
    holding.join()
    assert held.status is JobStatus.DONE and held.log == [f"Paused after step 2 of Counting until {release} exists."]
