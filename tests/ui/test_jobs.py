"""Jobs run from the pages: progress, cancel, failures explained with Retry, extraction report, history,
and closing the window with a job running."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from guiapp.jobs.history import load_history
from tests.support.devices import absent_cuda_device
from tests.ui.conftest import wait_for_job, with_gpu


def _medium_recipe(models, method="ties"):
    return {"merge_method": method, "base_model": str(models.medium_base),
            "models": [{"model": str(models.medium_a), "parameters": {"weight": 0.5, "density": 0.5}},
                       {"model": str(models.medium_b), "parameters": {"weight": 0.5, "density": 0.5}}]}


def _prepare(window, recipe, output):
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump(recipe, sort_keys=False))
    page.output_edit.setText(str(output))


def _hold_after_first_tensor(window, monkeypatch, tmp_path) -> None:
    """Jobs started from here on stay after their first merged tensor until cancelled (the release file never
    appears), so a test acts on a running job however fast the machine is."""
    from guiapp.progress import PausePoint  # noqa: PLC0415

    monkeypatch.setattr(window.state.jobs.runner, "pause_at", PausePoint("Merging", 1, str(tmp_path / "never-released")))


def _held(record) -> bool:
    return record.status == "running" and any(line.startswith("Paused after step 1 of Merging") for line in record.log)


def _bar_values(window):
    values = []
    window.jobs.bar.valueChanged.connect(values.append)
    return values


@pytest.mark.long
def test_a_merge_runs_to_completion_with_moving_progress(qtbot, window, models, tmp_path):
    _prepare(window, _medium_recipe(models), tmp_path / "merged")
    values = _bar_values(window)
    updates = []
    window.state.jobs.progress.connect(lambda key, event: updates.append(event.stage))
    qtbot.waitUntil(window.merge.run_button.isEnabled, timeout=20_000)  # once the recipe is checked
    qtbot.mouseClick(window.merge.run_button, Qt.MouseButton.LeftButton)
    assert window.current_page() == "jobs"
    record = wait_for_job(qtbot, window, window.jobs.selected)
    assert record.status == "done", record.log
    assert any(0 < v < 1000 for v in values), values  # seen part-way, not only empty and full
    # at most ten updates a second reach the window, plus the first and last of each stage
    stages = len(set(updates))
    assert len(updates) <= 10 * (record.finished - record.started) + 2 * stages + 1, (len(updates), stages)
    assert window.jobs.bar.value() == 1000
    assert "Wrote" in window.jobs.summary.text() and window.jobs.open_button.isEnabled()
    assert (tmp_path / "merged" / "config.json").is_file()
    assert window.jobs.elapsed.text().endswith("s")
    assert "Done" in window.jobs.log.toPlainText()


def test_cancel_stops_the_job_at_its_next_step(qtbot, window, models, tmp_path, monkeypatch):
    _hold_after_first_tensor(window, monkeypatch, tmp_path)
    _prepare(window, _medium_recipe(models, "della"), tmp_path / "cancelled")
    key = window.merge.run()
    record = window.state.jobs.record(key)
    qtbot.waitUntil(lambda: _held(record), timeout=60_000)
    qtbot.mouseClick(window.jobs.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: record.status not in ("queued", "running"), timeout=60_000)
    assert record.status == "cancelled"
    assert window.state.jobs.latest[key].done == 1  # stopped where it was: no tensor merged after the click
    assert not (tmp_path / "cancelled").exists()  # nothing half-written left behind
    assert window.jobs.status.text() == "Cancelled"
    assert not window.jobs.cancel_button.isEnabled()


def test_existing_output_folder_is_explained_and_retry_uses_a_new_name(qtbot, window, models, tmp_path):
    output = tmp_path / "taken"
    output.mkdir()
    recipe = {"merge_method": "linear", "models": [{"model": str(models.tune_a), "parameters": {"weight": 0.5}},
                                                   {"model": str(models.tune_b), "parameters": {"weight": 0.5}}]}
    _prepare(window, recipe, output)
    qtbot.waitUntil(lambda: "already exists" in window.merge.output_message.text(), timeout=20_000)
    record = wait_for_job(qtbot, window, window.merge.run())
    assert record.status == "failed"
    panel = window.jobs.explanation
    assert not panel.isHidden()
    assert panel.title.text() == "The output folder cannot be used"
    assert "already exists" in panel.what.text()
    assert "Traceback" in panel.details.toPlainText() and panel.details.isHidden()
    qtbot.mouseClick(panel.details_button, Qt.MouseButton.LeftButton)
    assert not panel.details.isHidden()
    new_name = tmp_path / "taken-2"
    assert not panel.retry_button.isHidden() and str(new_name) in panel.retry_button.toolTip()
    qtbot.mouseClick(panel.retry_button, Qt.MouseButton.LeftButton)
    retried = wait_for_job(qtbot, window, window.jobs.selected)
    assert retried.key != record.key and retried.status == "done"
    assert retried.spec["output"] == str(new_name) and retried.spec["overwrite"] is False
    assert (new_name / "model.safetensors").is_file() and not any(output.iterdir())  # the old folder is kept


def test_a_device_this_machine_lacks_is_explained_and_retried_on_the_cpu(qtbot, make_window, probed, models, tmp_path):
    absent = absent_cuda_device()  # offered as if it were here: the job finds out it is not
    window = make_window(with_gpu(probed, absent))
    page = window.merge
    assert page.device_combo.is_enabled_choice(absent)
    _prepare(window, {"merge_method": "linear", "models": [
        {"model": str(models.tune_a), "parameters": {"weight": 1.0}}]}, tmp_path / "gpu")
    page.device_combo.select(absent)
    record = wait_for_job(qtbot, window, page.run())
    assert record.status == "failed"
    panel = window.jobs.explanation
    assert panel.title.text() == "The chosen device cannot be used"
    assert absent in panel.what.text()
    assert "device = cpu" in panel.retry_button.toolTip()
    qtbot.mouseClick(panel.retry_button, Qt.MouseButton.LeftButton)
    retried = wait_for_job(qtbot, window, window.jobs.selected)
    assert retried.status == "done" and retried.spec["device"] == "cpu"


def test_an_extraction_runs_to_completion_with_its_report(qtbot, window, models, tmp_path):
    window.show_page("lora")
    page = window.lora
    page.extract.base.set_text(str(models.medium_base))
    page.extract.model.set_text(str(models.medium_a))
    page.extract.rank_value.setValue(8)
    page.extract.out.setText(str(tmp_path / "adapter"))
    qtbot.waitUntil(lambda: "pair up" in page.extract.check.text(), timeout=20_000)
    assert "Reads" in page.extract.estimate.text()
    values = _bar_values(window)
    qtbot.mouseClick(page.extract.run_button, Qt.MouseButton.LeftButton)
    record = wait_for_job(qtbot, window, window.jobs.selected, timeout=120_000)
    assert record.status == "done", record.log
    assert any(0 < v < 1000 for v in values), values
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    report = page.extract.report.text()
    assert "Adapter:" in report and "Change kept:" in report and "Keeps the least of its change:" in report
    assert "Adapter:" in window.jobs.summary.text()
    # and back: the adapter applied to the base gives a full model
    page.tabs.setCurrentIndex(1)
    page.apply.base.set_text(str(models.medium_base))
    page.apply.adapter.set_text(str(tmp_path / "adapter"))
    page.apply.out.setText(str(tmp_path / "applied"))
    qtbot.waitUntil(lambda: "fits this base model" in page.apply.check.text(), timeout=20_000)
    assert "Reads and writes" in page.apply.estimate.text()
    qtbot.mouseClick(page.apply.run_button, Qt.MouseButton.LeftButton)
    applied = wait_for_job(qtbot, window, window.jobs.selected, timeout=120_000)
    assert applied.status == "done", applied.log
    assert (tmp_path / "applied" / "config.json").is_file()
    assert "changed by the adapter" in window.jobs.summary.text()


def test_history_survives_a_restart_without_secrets(qtbot, make_window, models, tmp_path):
    window = make_window()
    recipe = {"merge_method": "linear", "models": [{"model": str(models.tune_a), "parameters": {"weight": 1.0}}],
              "hf_token": "hf_secret"}
    _prepare(window, recipe, tmp_path / "one")
    record = wait_for_job(qtbot, window, window.merge.run())
    assert record.status == "done"
    window.state.jobs.shutdown()
    saved = load_history()
    assert [r.key for r in saved] == [record.key]
    assert "hf_secret" not in (tmp_path / "config" / "jobs_history.json").read_text()
    again = make_window()
    rows = again.jobs.list.model()
    assert rows.rowCount() == 1
    assert rows.index(0).data().startswith(f"Done · {record.title}\nMerge, ")
    again.jobs.list.setCurrentIndex(rows.index(0))
    assert again.jobs.title.text() == record.title and again.jobs.status.text() == "Done"


def test_closing_with_a_running_job_asks_then_cancels(qtbot, window, models, tmp_path, monkeypatch):
    _hold_after_first_tensor(window, monkeypatch, tmp_path)
    _prepare(window, _medium_recipe(models, "della"), tmp_path / "closing")
    key = window.merge.run()
    record = window.state.jobs.record(key)
    qtbot.waitUntil(lambda: _held(record), timeout=60_000)
    answers = []

    def answer(button):
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            answers.append(box.text())
            box.button(button).click()
        else:
            QTimer.singleShot(50, lambda: answer(button))

    QTimer.singleShot(50, lambda: answer(QMessageBox.StandardButton.No))
    window.close()
    assert window.isVisible() and record.status == "running"  # "Keep running" keeps everything as it was
    QTimer.singleShot(50, lambda: answer(QMessageBox.StandardButton.Yes))
    window.close()  # the job is held until cancelled: only the cancel can end it and record it as cancelled
    assert not window.isVisible()
    assert len(answers) == 2 and "still running" in answers[0]
    assert not (tmp_path / "closing").exists()
    assert load_history()[-1].status == "cancelled"


@pytest.fixture
def tiny_disk(tmp_path):
    """A 4 MB filesystem for the output (needs root and permission to mount, else the test is skipped)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tiny filesystem needs root")
    mount = tmp_path / "tiny-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("this machine does not allow mounting a filesystem")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_seen_before_the_merge_and_explained(qtbot, window, models, tiny_disk):
    _prepare(window, _medium_recipe(models), tiny_disk / "merged")
    page = window.merge
    qtbot.waitUntil(lambda: page.fit_label.text().startswith("Will not fit"), timeout=20_000)
    assert "only" in page.fit_label.text() and "Disk:" in page.fit_label.toolTip()
    record = wait_for_job(qtbot, window, page.run())
    assert record.status == "failed"
    panel = window.jobs.explanation
    assert panel.title.text() == "Not enough space or memory"
    assert "disk" in panel.what.text() and "another disk" in panel.fix.text()
    assert list(tiny_disk.iterdir()) == []  # nothing was started on it


@pytest.mark.long
def test_a_finished_job_shows_its_own_stage_not_the_last_selected_jobs(qtbot, window, models, tmp_path):
    page = window.lora
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    page.extract.out.setText(str(tmp_path / "adapter"))
    qtbot.waitUntil(page.extract.run_button.isEnabled, timeout=20_000)
    qtbot.mouseClick(page.extract.run_button, Qt.MouseButton.LeftButton)
    extraction = wait_for_job(qtbot, window, window.jobs.selected, timeout=120_000)
    assert extraction.status == "done", extraction.log
    _prepare(window, _medium_recipe(models), tmp_path / "merged")
    qtbot.waitUntil(window.merge.run_button.isEnabled, timeout=20_000)
    qtbot.mouseClick(window.merge.run_button, Qt.MouseButton.LeftButton)
    merge = wait_for_job(qtbot, window, window.jobs.selected, timeout=120_000)
    assert merge.status == "done", merge.log
    window.jobs.select(extraction.key)
    # A finished job says so, not the step it last reported (that read "Generating (0 of 128)" at 100 %).
    assert window.jobs.stage.text() == "Finished" and window.jobs.item.text() == ""
    assert window.jobs.title.text() == extraction.title and window.jobs.bar.value() == 1000


def test_a_sub_second_merge_says_so_in_words():
    from types import SimpleNamespace

    from guiapp.ui.pages.jobs import summary_text

    record = SimpleNamespace(status="done", kind="merge", summary={"tensors": 3, "output_bytes": 2000,
                                                                    "output": "/out", "seconds": 0.4})
    assert summary_text(record) == "Wrote 3 tensors (2.0 KB) to /out in less than a second."


def test_a_job_that_failed_at_once_did_not_take_0_s(qtbot, window, models, tmp_path):
    taken = tmp_path / "taken"  # a folder Mergesmith did not write: the merge is refused before any work
    page = window.merge
    page.output_edit.setText(str(taken))
    page.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "linear", "models": [
        {"model": str(models.tune_a), "parameters": {"weight": 0.5}},
        {"model": str(models.tune_b), "parameters": {"weight": 0.5}}]}))
    qtbot.waitUntil(page.run_button.isEnabled, timeout=30_000)
    taken.mkdir()
    (taken / "notes.txt").write_text("not a model\n")
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    record = wait_for_job(qtbot, window, window.jobs.selected)
    assert record.status == "failed"
    assert window.jobs.elapsed.text() not in ("", "0 s")  # it ran for some time, however short


@pytest.mark.parametrize(("total", "work_done", "work_total", "expected"), [
    (48, 0.0, 1.0, "not known yet"),  # a stage that counts its cost, before its first step: Generate before a token
    (48, 0.5, 1.0, "not known yet"),
    (48, 1.0, 1.0, ""),
    (0, 0.0, 0.0, ""),  # a stage that counts nothing (loading a model): no time left to speak of
])
def test_the_time_left_says_when_it_is_not_known_yet(window, total, work_done, work_total, expected):
    from guiapp.progress import ProgressEvent  # noqa: PLC0415

    page = window.jobs
    page.selected = "a-job"
    page._progress("a-job", ProgressEvent(stage="Generating", done=0, total=total, bytes_done=0, bytes_total=0,
                                          item="", elapsed=0.5, rate=None, eta=None, work_done=work_done,
                                          work_total=work_total))
    assert page.eta.text() == expected
