"""Every status follows the state it describes: the Start page's "press Run merge" goes once the
sample merge runs, and a gated model's problem on the Merge page goes once the user has signed in."""

from __future__ import annotations

import pytest
import yaml
from PySide6.QtCore import Qt

from tests.support.hub_server import TEST_TOKEN
from tests.ui.conftest import wait_for_job


def test_the_start_page_follows_the_sample_merge_it_prepared(qtbot, window, tmp_path):
    window.welcome.try_samples(tmp_path / "samples")
    qtbot.waitUntil(lambda: window.current_page() == "merge", timeout=60_000)
    assert "press Run merge" in window.welcome.status.text()
    button = window.merge.run_button
    qtbot.waitUntil(button.isEnabled, timeout=30_000)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"
    status = window.welcome.status.text()
    assert "press Run merge" not in status and status.startswith("The sample merge is done"), status


def test_a_gated_models_problem_goes_once_signed_in(qtbot, window, models, hub_env, hub_server):
    hub_server.add_model("org/gated-tune", models.tune_b, gated="auto")
    page = window.merge
    window.show_page("merge")
    page.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "linear", "models": [
        {"model": str(models.tune_a), "parameters": {"weight": 0.5}},
        {"model": "org/gated-tune", "parameters": {"weight": 0.5}}]}))
    status = page.run_box.action_bar.status
    qtbot.waitUntil(lambda: status.text().startswith("Fix: "), timeout=30_000)
    assert "gated" in status.text()
    window.show_page("settings")
    token = window.settings.token_edit
    qtbot.mouseClick(token, Qt.MouseButton.LeftButton)
    qtbot.keyClicks(token, TEST_TOKEN)
    qtbot.keyClick(token, Qt.Key.Key_Return)
    qtbot.waitUntil(page.run_button.isEnabled, timeout=30_000)  # checked again after signing in
    assert status.text() == "Ready." and "gated" not in page.models_message.text()


def _linear(*models):
    return {"merge_method": "linear", "models": [{"model": str(m), "parameters": {"weight": 0.5}} for m in models]}


def test_the_merge_form_is_checked_again_once_its_job_has_written_the_output(qtbot, window, models, tmp_path):
    page = window.merge
    window.show_page("merge")
    page.yaml_edit.setPlainText(yaml.safe_dump(_linear(models.tune_a, models.tune_b)))
    page.output_edit.setText(str(tmp_path / "linear"))
    qtbot.waitUntil(page.run_button.isEnabled, timeout=30_000)
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"
    window.show_page("merge")
    bar = page.run_box.action_bar
    qtbot.waitUntil(lambda: bar.status.text().startswith("Fix:"), timeout=20_000)  # not "Ready." any more
    assert "already exists" in bar.status.text() and not page.run_button.isEnabled()
    assert bar.fix_button.text() == "Use a new name: linear-2"
    assert bar.status.text().startswith("Fix: linear already exists")  # the folder's name: its path is above


@pytest.mark.long
def test_the_lora_page_follows_a_retry_and_checks_its_form_again(qtbot, window, models, tmp_path):
    page = window.lora
    window.show_page("lora")
    taken = tmp_path / "adapter"
    taken.mkdir()  # empty: the failure suggests a new name
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    page.extract.out.setText(str(taken))
    qtbot.waitUntil(lambda: page.extract.bar.status.text().startswith("Fix:"), timeout=20_000)
    failed = wait_for_job(qtbot, window, page.extract.run())  # as a user who ran it anyway would
    assert failed.status == "failed" and "failed" in page.extract.report.text()

    retry = window.jobs.explanation.retry_button
    assert retry is not None and retry.text() == "Retry with a new name: adapter-2"
    qtbot.mouseClick(retry, Qt.MouseButton.LeftButton)
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"
    assert "failed" not in page.extract.report.text() and page.extract.report.text().startswith("Adapter:")

    page.extract.out.setText(str(tmp_path / "adapter-2"))  # the folder the retry just wrote
    qtbot.waitUntil(lambda: page.extract.bar.status.text().startswith("Fix:"), timeout=20_000)
    page.extract.out.setText(str(tmp_path / "adapter-3"))
    qtbot.waitUntil(page.extract.run_button.isEnabled, timeout=20_000)
    qtbot.mouseClick(page.extract.run_button, Qt.MouseButton.LeftButton)
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"
    window.show_page("lora")
    qtbot.waitUntil(lambda: page.extract.bar.status.text().startswith("Fix:"), timeout=20_000)  # its own output now
    assert page.extract.bar.status.text().startswith("Fix: adapter-3 already exists")
    assert not page.extract.run_button.isEnabled()
