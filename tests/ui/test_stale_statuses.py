"""Every status follows the state it describes (issue 12.8): the Start page's "press Run merge" goes once the
sample merge runs, and a gated model's problem on the Merge page goes once the user has signed in."""

from __future__ import annotations

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
