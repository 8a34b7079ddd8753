"""The Jobs page's list is a Qt item model over the job bridge: newest first, a running job's stage and share
done in its row, and a consistent model as Qt's own model tester checks it."""

from __future__ import annotations

import re
import threading

from PySide6.QtCore import Qt
from PySide6.QtTest import QAbstractItemModelTester

from guiapp.jobs.runner import Job
from guiapp.ui.job_bridge import JobBridge
from guiapp.ui.job_list_model import KEY_ROLE, JobListModel


def _job(title: str, kind: str, gate: threading.Event | None = None) -> Job:
    def work(progress):
        progress.start_stage("Merging", total=4)
        progress.step("layer 0")
        if gate is not None:
            gate.wait(30)
        return {"output": "/models/merged"}

    return Job(title=title, kind=kind, spec={}, work=work)


def test_the_jobs_list_is_an_item_model_newest_first_with_live_status(qtbot):
    bridge = JobBridge(keep_history=False)
    model = JobListModel(bridge)
    QAbstractItemModelTester(model, QAbstractItemModelTester.FailureReportingMode.Fatal)
    gate = threading.Event()
    try:
        first = bridge.submit(_job("Merge (ties) → merged", "merge", gate))
        second = bridge.submit(_job("Download org/base", "download"))
        assert model.rowCount() == 2
        assert [model.index(row).data(KEY_ROLE) for row in range(2)] == [second.key, first.key]
        running = re.compile(r"Merging \d+% · Merge \(ties\) → merged\nMerge, \d\d \w{3} \d\d:\d\d")
        qtbot.waitUntil(lambda: running.fullmatch(model.index(1).data()) is not None)  # its stage, not "Running"
        assert model.index(1).data(Qt.ItemDataRole.ToolTipRole) == "Merge (ties) → merged"
        assert model.index(0).data().startswith("Waiting · Download org/base\nDownload, ")
        gate.set()
        qtbot.waitUntil(lambda: model.index(0).data().startswith("Done · Download org/base"))
        assert model.index(1).data().startswith("Done · Merge (ties) → merged")
        bridge.clear_finished()
        model.reload()
        assert model.rowCount() == 0 and not model.row_of(first.key).isValid()
    finally:
        gate.set()
        bridge.shutdown(10)


def test_a_job_that_ends_between_two_updates_is_shown_where_it_stopped(qtbot):
    """At most ten updates a second reach the window; the steps after the last one sent still count when the job
    ends: a merge cancelled 25 tensors in read "Cancelled at 0%" when all 25 fell within a tenth of a second."""
    from guiapp.errors import JobCancelled  # noqa: PLC0415
    from guiapp.jobs.runner import JobStatus  # noqa: PLC0415

    def work(progress):
        progress.start_stage("Merging", total=100)
        for index in range(40):
            progress.step(f"tensor {index}")
        raise JobCancelled("Cancelled.")

    bridge = JobBridge(keep_history=False)
    try:
        record = bridge.submit(Job(title="Merge (linear) → merged", kind="merge", spec={}, work=work))
        qtbot.waitUntil(lambda: record.status == JobStatus.CANCELLED)
        assert bridge.latest[record.key].done == 40
        assert record.last_fraction == 0.4
    finally:
        bridge.shutdown(10)
