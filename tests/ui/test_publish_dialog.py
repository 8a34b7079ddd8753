"""The Publish dialog with real widgets against the test Hub's upload API."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from tests.support.hub_server import TEST_TOKEN, TEST_USER, enable_uploads


@pytest.fixture
def uploads(hub_env, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    return enable_uploads(hub_env.server, tmp_path / "hub-store")


def test_publish_from_the_try_page(qtbot, window, models, uploads):
    page = window.try_page
    page.set_models([str(models.base), str(models.tune_a)])
    dialog = page.open_publish()
    qtbot.addWidget(dialog)
    assert dialog.folder == models.tune_a and dialog.private.isChecked()
    qtbot.waitUntil(lambda: dialog.check_status.text().startswith("Ready"), timeout=30_000)
    assert dialog.repo.text() == f"{TEST_USER}/{models.tune_a.name}"
    assert "license: other" in dialog.card.toPlainText() and "mergekit" in dialog.card.toPlainText()
    dialog.licence.setCurrentText("apache-2.0")
    dialog.card.setPlainText(dialog.card.toPlainText() + "\nReviewed by a person.\n")
    qtbot.mouseClick(dialog.publish, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.progress_text.text().startswith("Published"), timeout=60_000)
    repo = f"{TEST_USER}/{models.tune_a.name}"
    assert uploads.private[repo] is True
    card = (uploads.store / repo / "README.md").read_text()
    assert "license: apache-2.0" in card and card.rstrip().endswith("Reviewed by a person.")


def test_refusals_are_shown_before_publishing(qtbot, window, models, uploads):
    from guiapp.ui.publish_dialog import PublishDialog

    dialog = PublishDialog(window.state, models.base, window)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.check_status.text().startswith("Ready"), timeout=30_000)
    dialog.repo.setText("someone-else/model")
    qtbot.waitUntil(lambda: "not your account" in dialog.check_status.text(), timeout=30_000)
    assert not dialog.publish.isEnabled()
    uploads.roles[TEST_TOKEN] = "read"
    dialog.repo.setText(f"{TEST_USER}/model")
    qtbot.waitUntil(lambda: "can only read" in dialog.check_status.text(), timeout=30_000)
    assert not dialog.publish.isEnabled() and uploads.created == []


def test_changing_the_licence_keeps_the_card_edits(qtbot, window, models, uploads):
    from guiapp.ui.publish_dialog import PublishDialog

    dialog = PublishDialog(window.state, models.tune_a, window)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.check_status.text().startswith("Ready"), timeout=30_000)
    dialog.card.setPlainText(dialog.card.toPlainText() + "\nReviewed by a person.\n")
    dialog.licence.setCurrentText("mit")
    card = dialog.card.toPlainText()
    assert "license: mit" in card and card.rstrip().endswith("Reviewed by a person.")


def test_publish_a_finished_merge_from_the_jobs_page(qtbot, window, models, uploads, tmp_path):
    import yaml

    from tests.ui.conftest import wait_for_job

    recipe = {"merge_method": "linear", "models": [{"model": str(models.base), "parameters": {"weight": 0.5}},
                                                   {"model": str(models.tune_a), "parameters": {"weight": 0.5}}]}
    window.merge.yaml_edit.setPlainText(yaml.safe_dump(recipe, sort_keys=False))
    window.merge.output_edit.setText(str(tmp_path / "merged"))
    qtbot.waitUntil(window.merge.run_button.isEnabled, timeout=20_000)
    qtbot.mouseClick(window.merge.run_button, Qt.MouseButton.LeftButton)
    record = wait_for_job(qtbot, window, window.jobs.selected)
    assert record.status == "done", record.log
    button = window.jobs.publish_button
    assert button.isVisibleTo(window.jobs) and button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    dialog = button.dialog
    qtbot.addWidget(dialog)
    assert dialog.folder == tmp_path / "merged"
    qtbot.waitUntil(lambda: dialog.check_status.text().startswith("Ready"), timeout=30_000)
    assert dialog.repo.text() == f"{TEST_USER}/merged"
    button.show_record(None)  # no job selected: nothing to publish
    assert not button.isVisibleTo(window.jobs)


def test_a_bare_repo_name_is_published_under_the_signed_in_user(qtbot, window, models, uploads):
    from guiapp.ui.publish_dialog import PublishDialog

    dialog = PublishDialog(window.state, models.tune_a, window)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.check_status.text().startswith("Ready"), timeout=30_000)
    dialog.repo.setText("merged")
    qtbot.waitUntil(lambda: dialog.check_status.text().startswith("Ready") and "merged" in dialog.check_status.text(),
                    timeout=30_000)
    assert f"{TEST_USER}/merged" in dialog.check_status.text()
    qtbot.mouseClick(dialog.publish, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.progress_text.text().startswith("Published"), timeout=60_000)
    assert uploads.created == [f"{TEST_USER}/merged"]


def test_a_folder_that_is_not_a_model_is_published_only_when_confirmed(qtbot, window, uploads, tmp_path):
    from PySide6.QtWidgets import QMessageBox

    from guiapp.ui.publish_dialog import PublishDialog

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host example\n")
    (home / "notes.txt").write_text("shopping list\n")
    dialog = PublishDialog(window.state, home, window)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: "does not look like a model" in dialog.check_status.text(), timeout=30_000)
    assert "config.json" in dialog.check_status.text() and dialog.publish.isEnabled()
    qtbot.mouseClick(dialog.publish, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.confirm is not None and dialog.confirm.isVisible(), timeout=5_000)
    dialog.confirm.button(QMessageBox.StandardButton.Cancel).click()
    assert dialog._key is None and uploads.created == []
    qtbot.mouseClick(dialog.publish, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.confirm.isVisible(), timeout=5_000)
    dialog.confirm.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: dialog.progress_text.text().startswith("Published"), timeout=60_000)
    assert uploads.created == [f"{TEST_USER}/home"]


def test_an_existing_public_repo_needs_private_cleared(qtbot, window, models, uploads):
    from guiapp.hub.upload import check_upload, upload_folder
    from guiapp.ui.publish_dialog import PublishDialog

    repo = f"{TEST_USER}/{models.base.name}"
    upload_folder(check_upload(models.base, repo, private=False))
    dialog = PublishDialog(window.state, models.base, window)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: "public already" in dialog.check_status.text(), timeout=30_000)
    assert not dialog.publish.isEnabled()
    dialog.private.setChecked(False)
    qtbot.waitUntil(lambda: dialog.check_status.text().startswith("Ready"), timeout=30_000)
    assert dialog.publish.isEnabled()


def test_sign_out_is_enabled_only_while_signed_in_with_a_stored_token(qtbot, window, hub_env):
    page = window.settings
    window.show_page("settings")
    qtbot.waitUntil(lambda: "Not signed in" in page.account.text(), timeout=15_000)
    assert not page.sign_out_button.isEnabled()
    page.token_edit.setText(TEST_TOKEN)
    qtbot.mouseClick(page.sign_in_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.account.text() == f"Signed in as {TEST_USER}", timeout=15_000)
    assert page.sign_out_button.isEnabled()
    qtbot.mouseClick(page.sign_out_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Not signed in" in page.account.text(), timeout=15_000)
    assert not page.sign_out_button.isEnabled()
