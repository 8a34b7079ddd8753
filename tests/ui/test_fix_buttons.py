"""Every button an explanation offers does what it says, driven by real clicks: Retry, Retry with a new name,
Replace (the only path that deletes, and only after "Replace folder"), Choose another folder…, Sign in…, Open the
model's page (the address to copy when no browser opens it), Use offline mode; and no command-line flag or
environment variable is left in the window's text."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QAbstractButton, QLabel

from guiapp.checkpoints.output_guard import MARKER
from guiapp.jobs.fixes import (
    CHOOSE_FOLDER,
    GO_ONLINE,
    OPEN_MODEL_PAGE,
    REPLACE,
    RETRY,
    RETRY_WITH,
    SIGN_IN,
    USE_OFFLINE,
)
from tests.support.hub_server import TEST_TOKEN
from tests.ui.conftest import wait_for_job

CLI_WORDS = re.compile(r"(?<![\w/.-])--[a-z]|HF_[A-Z]|hf auth")


def _linear(*models):
    return {"merge_method": "linear", "models": [{"model": str(m), "parameters": {"weight": 0.5}} for m in models]}


def _run(qtbot, window, recipe, output):
    """Run `recipe` into `output` from the Merge page, as a user who clicks Run anyway would (page.run: the button
    itself is disabled while the check finds the problem); returns the finished record."""
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump(recipe))
    page.output_edit.setText(str(output))
    return wait_for_job(qtbot, window, page.run())


def _click(qtbot, button):
    assert button is not None and button.isVisible() and button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def _marker_id(folder):
    return json.loads((folder / MARKER).read_text())["id"]


def _no_cli_words_in(window):
    shown = [w.text() for w in window.findChildren(QLabel) + window.findChildren(QAbstractButton)]
    offending = [text for text in shown if CLI_WORDS.search(text)]
    assert not offending, offending


def test_replace_is_a_separate_choice_that_deletes_only_after_the_explicit_click(qtbot, window, models, tmp_path):
    output = tmp_path / "tiny-merge"
    assert _run(qtbot, window, _linear(models.tune_a, models.tune_b), output).status == "done"
    first_id = _marker_id(output)
    failed = _run(qtbot, window, _linear(models.tune_a, models.tune_b), output)  # the folder is there now
    assert failed.status == "failed"
    panel = window.jobs.explanation
    assert list(panel.buttons) == [RETRY_WITH, CHOOSE_FOLDER, REPLACE, RETRY]
    assert panel.buttons[RETRY_WITH].text() == "Retry with a new name: tiny-merge-2"
    assert panel.buttons[REPLACE].text() == "Replace tiny-merge…"
    assert "earlier Mergesmith merge output" in panel.buttons[REPLACE].toolTip()
    _no_cli_words_in(window)

    _click(qtbot, panel.buttons[REPLACE])
    question = panel.confirm_replace
    assert question is not None and "earlier Mergesmith merge output" in question.text()
    keep = next(b for b in question.buttons() if b.text() == "Keep it")
    _click(qtbot, keep)
    qtbot.waitUntil(lambda: panel.confirm_replace is None, timeout=5_000)
    assert len(window.state.jobs.records) == 2 and _marker_id(output) == first_id  # nothing ran, nothing deleted

    _click(qtbot, panel.buttons[REPLACE])
    replace = next(b for b in panel.confirm_replace.buttons() if b.text() == "Replace folder")
    _click(qtbot, replace)
    replaced = wait_for_job(qtbot, window, window.jobs.selected)
    assert replaced.key != failed.key and replaced.status == "done" and replaced.spec["overwrite"] is True
    assert _marker_id(output) != first_id  # the new output took the old one's place


def test_a_cancelled_or_failed_job_has_a_plain_retry_that_runs_it_again(qtbot, window, models, tmp_path):
    failed = _run(qtbot, window, _linear(models.base, models.wider), tmp_path / "mixed")  # shapes differ
    assert failed.status == "failed"
    assert not window.jobs.bar.isVisible()  # no full blue bar for a job that failed
    panel = window.jobs.explanation
    assert RETRY in panel.buttons
    _click(qtbot, panel.buttons[RETRY])
    again = window.state.jobs.record(window.jobs.selected)
    assert again.key != failed.key and again.spec == failed.spec
    assert wait_for_job(qtbot, window, again.key).status == "failed"
    _no_cli_words_in(window)


def test_a_cancelled_job_keeps_its_bar_where_it_stopped_in_the_warning_colour(qtbot, window, models, tmp_path,
                                                                             monkeypatch):
    from guiapp.progress import PausePoint  # noqa: PLC0415
    from guiapp.ui.theme import status_colour  # noqa: PLC0415

    monkeypatch.setattr(window.state.jobs.runner, "pause_at", PausePoint("Merging", 1, str(tmp_path / "never-released")))
    window.merge.yaml_edit.setPlainText(yaml.safe_dump(_linear(models.medium_a, models.medium_b)))
    window.merge.output_edit.setText(str(tmp_path / "stopped"))
    key = window.merge.run()
    record = window.state.jobs.record(key)
    qtbot.waitUntil(lambda: any(line.startswith("Paused after step 1") for line in record.log), timeout=60_000)
    _click(qtbot, window.jobs.cancel_button)
    qtbot.waitUntil(lambda: record.status == "cancelled", timeout=60_000)
    bar = window.jobs.bar
    assert bar.isVisible() and bar.value() < 1000 and bar.text().startswith("Cancelled at")
    assert bar.palette().highlight().color().name() == status_colour("warning")
    window.state.jobs.runner.pause_at = None
    _click(qtbot, window.jobs.explanation.buttons[RETRY])
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"


def test_choose_another_folder_runs_the_job_there_and_leaves_the_folder_that_was_in_the_way(qtbot, window, models,
                                                                                              tmp_path):
    taken = tmp_path / "mine"
    taken.mkdir()
    (taken / "notes.txt").write_text("not Mergesmith's")
    assert _run(qtbot, window, _linear(models.tune_a, models.tune_b), taken).status == "failed"
    panel = window.jobs.explanation
    assert REPLACE not in panel.buttons  # a folder Mergesmith did not make is never offered for replacing
    _click(qtbot, panel.buttons[CHOOSE_FOLDER])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dialog = window.jobs.folder_dialog
    dialog.selectFile(str(elsewhere))
    dialog.accept()
    retried = wait_for_job(qtbot, window, window.jobs.selected)
    assert retried.status == "done" and retried.spec["output"] == str(elsewhere / "mine")
    assert (elsewhere / "mine" / MARKER).is_file() and (taken / "notes.txt").read_text() == "not Mergesmith's"


def test_a_gated_model_offers_its_page_and_sign_in_which_then_lets_the_retry_through(qtbot, window, models,
                                                                                    tmp_path, hub_env, hub_server):
    hub_server.add_model("org/gated-tune", models.tune_b, gated="auto")
    failed = _run(qtbot, window, _linear(models.tune_a, "org/gated-tune"), tmp_path / "gated-merge")
    assert failed.status == "failed"
    panel = window.jobs.explanation
    assert list(panel.buttons) == [OPEN_MODEL_PAGE, SIGN_IN, RETRY]
    _no_cli_words_in(window)

    _click(qtbot, panel.buttons[OPEN_MODEL_PAGE])  # no browser on this machine: the address to copy instead
    fallback = panel.link_fallback
    assert fallback.isVisible() and fallback.address.text() == f"{hub_server.url}/org/gated-tune"
    _click(qtbot, fallback.copy_button)
    assert QGuiApplication.clipboard().text() == fallback.address.text()

    _click(qtbot, panel.buttons[SIGN_IN])
    assert window.current_page() == "settings"
    token = window.settings.token_edit
    assert window.focusWidget() is token
    qtbot.keyClicks(token, TEST_TOKEN)
    qtbot.keyClick(token, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.settings.account.text().startswith("Signed in as"), timeout=20_000)
    window.show_page("jobs")
    _click(qtbot, window.jobs.explanation.buttons[RETRY])
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"


def test_an_unreachable_hub_offers_offline_mode(qtbot, window, models, tmp_path, hub_env, hub_server):
    from guiapp.hub.connection import is_offline  # noqa: PLC0415

    hub_server.add_model("org/tune", models.tune_b)
    hub_server.stop()
    failed = _run(qtbot, window, _linear(models.tune_a, "org/tune"), tmp_path / "unreachable")
    assert failed.status == "failed"
    panel = window.jobs.explanation
    assert USE_OFFLINE in panel.buttons, (failed.explanation or {}).get("kind")
    _click(qtbot, panel.buttons[USE_OFFLINE])
    assert window.settings.offline_check.isChecked() and is_offline()
    window.settings.offline_check.setChecked(False)  # the switch is kept in this test's settings only


def test_offline_mode_in_the_way_offers_to_go_online(qtbot, window, models, tmp_path, hub_env, hub_server):
    from guiapp.hub.connection import is_offline  # noqa: PLC0415

    hub_server.add_model("org/tune", models.tune_b)
    window.show_page("settings")
    switch = window.settings.offline_check
    qtbot.mouseClick(switch, Qt.MouseButton.LeftButton, pos=QPoint(8, switch.height() // 2))  # on its box
    assert is_offline()
    failed = _run(qtbot, window, _linear(models.tune_a, "org/tune"), tmp_path / "offline")
    assert failed.status == "failed"
    panel = window.jobs.explanation
    assert GO_ONLINE in panel.buttons, (failed.explanation or {}).get("kind")
    _no_cli_words_in(window)
    _click(qtbot, panel.buttons[GO_ONLINE])
    assert not window.settings.offline_check.isChecked() and not is_offline()
    _click(qtbot, panel.buttons[RETRY])
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"


@pytest.mark.long
def test_an_output_folder_that_is_taken_blocks_run_and_offers_a_new_name_before_anything_runs(qtbot, window, models,
                                                                                             tmp_path):
    output = tmp_path / "tiny-merge"
    assert _run(qtbot, window, _linear(models.tune_a, models.tune_b), output).status == "done"
    window.show_page("merge")
    page, bar = window.merge, window.merge.run_box.action_bar
    page.output_edit.setText("")
    page.output_edit.setText(str(output))  # the same merge again, into the folder the first run made
    qtbot.waitUntil(lambda: bar.status.text().startswith("Fix:"), timeout=20_000)
    assert "already exists" in bar.status.text() and not page.run_button.isEnabled()
    assert bar.fix_button.text() == "Use a new name: tiny-merge-2"
    _click(qtbot, bar.fix_button)
    qtbot.waitUntil(page.run_button.isEnabled, timeout=20_000)
    assert page.output_edit.text() == str(tmp_path / "tiny-merge-2") and bar.status.text() == "Ready."

    page.output_edit.setText(str(output))  # or keep the name and allow replacing the earlier output
    qtbot.waitUntil(lambda: bar.status.text().startswith("Fix:"), timeout=20_000)
    box = page.overwrite_check
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))  # on the box, not its row
    qtbot.waitUntil(page.run_button.isEnabled, timeout=20_000)
    assert box.isChecked() and len(window.state.jobs.records) == 1  # nothing ran to find any of this out
