"""The Models page against the tests' Hub server: search as you type, details with the fit badge, download as
a job, the Downloaded list, local folders, and handing a model to the Merge and LoRA pages."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication, QMessageBox

from tests.ui.conftest import wait_for_job


def _catalogue(hub_env, models):
    server = hub_env.server
    server.add_model("smith/tiny-base", models.base, downloads=500, likes=7, card_data={"license": "apache-2.0"})
    server.add_model("smith/tiny-chat", models.tune_a, downloads=90, likes=3,
                     card_data={"license": "apache-2.0", "base_model": "smith/tiny-base"})
    server.add_model("smith/tiny-gated", models.base, gated=True, downloads=10)
    server.add_model("other/unrelated", models.wider, downloads=5)


def _search(qtbot, window, text):
    page = window.models
    window.activateWindow()  # shortcuts reach an active window only
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)
    qtbot.keySequence(window, QKeySequence(QKeySequence.StandardKey.Find))  # Ctrl+F focuses the search box
    assert window.current_page() == "models" and QApplication.focusWidget() is page.hub.search_edit
    qtbot.keyClicks(page.hub.search_edit, text)
    qtbot.waitUntil(lambda: "models" in page.hub.search_status.text(), timeout=15_000)
    return page


def test_search_as_you_type_and_open_details(qtbot, window, hub_env, models):
    _catalogue(hub_env, models)
    page = _search(qtbot, window, "tiny")
    rows = {page.hub.results.item(r, 0).text(): r for r in range(page.hub.results.rowCount())}
    assert set(rows) == {"smith/tiny-base", "smith/tiny-chat", "smith/tiny-gated"}
    assert page.hub.results.item(rows["smith/tiny-gated"], 7).text() == "Gated"
    assert page.hub.results.item(rows["smith/tiny-base"], 4).text() == "500"
    assert page.hub.results.item(rows["smith/tiny-base"], 3).text() == "Fits"  # its download fits the disk
    assert page.hub.results.item(rows["smith/tiny-base"], 1).text().endswith("KB")  # bf16 weights: 2 bytes each
    # typing on replaces the results (the earlier, stale search is dropped)
    qtbot.keyClicks(page.hub.search_edit, "-chat")
    qtbot.waitUntil(lambda: page.hub.results.rowCount() == 1, timeout=15_000)
    page.hub.results.selectRow(0)
    qtbot.waitUntil(lambda: "Licence" in page.details_pane.detail_facts.text(), timeout=15_000)
    facts = page.details_pane.detail_facts.text()
    assert "apache-2.0" in facts and "smith/tiny-base" in facts and "BF16" in facts
    assert page.details_pane.detail_files.count() >= 2
    badge = page.details_pane.fit_badge
    assert badge.text().startswith("● Fits this machine: ") and "to download" in badge.text()
    assert "of memory to merge or extract" in badge.text()  # what a merge needs, not the model's size
    assert "tensor by tensor" in badge.toolTip()
    # hand it to the LoRA page with its base filled in
    qtbot.mouseClick(page.details_pane.extract_button, Qt.MouseButton.LeftButton)
    assert window.current_page() == "lora"
    assert window.lora.extract.model.text() == "smith/tiny-chat" and window.lora.extract.base.text() == "smith/tiny-base"


def test_download_runs_as_a_job_and_shows_in_downloaded(qtbot, window, hub_env, models):
    _catalogue(hub_env, models)
    page = window.models
    page.details_pane.open_details("smith/tiny-base")
    qtbot.waitUntil(page.details_pane.download_button.isEnabled, timeout=15_000)
    qtbot.mouseClick(page.details_pane.download_button, Qt.MouseButton.LeftButton)
    record = window.state.jobs.records[-1]
    assert record.kind == "download"
    assert "Downloading" in page.details_pane.detail_status.text()
    assert wait_for_job(qtbot, window, record.key).status == "done"
    assert page.details_pane.detail_status.text().startswith("Downloaded smith/tiny-base")  # not "Downloading…"
    qtbot.waitUntil(lambda: "downloaded" in page.details_pane.fit_badge.text(), timeout=15_000)
    page.tabs.setCurrentIndex(1)
    qtbot.waitUntil(lambda: page.downloaded.rows.rowCount() == 1, timeout=15_000)
    assert page.downloaded.rows.index(0, 0).data() == "smith/tiny-base"
    page.downloaded.cache_table.selectRow(0)

    def confirm():
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            assert "frees" in box.text()
            qtbot.mouseClick(box.button(QMessageBox.StandardButton.Yes), Qt.MouseButton.LeftButton)
        else:
            QTimer.singleShot(50, confirm)

    QTimer.singleShot(50, confirm)
    qtbot.mouseClick(page.downloaded.delete_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "freed" in page.downloaded.cache_status.text(), timeout=15_000)
    qtbot.waitUntil(lambda: page.downloaded.rows.rowCount() == 0, timeout=15_000)


def test_search_offline_says_so(qtbot, window, hub_env):
    window.settings.offline_check.setChecked(True)
    page = window.models
    page.hub.search_edit.setText("tiny")
    qtbot.waitUntil(lambda: "offline" in page.hub.search_status.text(), timeout=15_000)
    said = page.hub.search_status.text()
    assert "Work offline in Settings" in said and "HF_HUB_OFFLINE" not in said  # the window's way, not the shell's
    window.settings.offline_check.setChecked(False)


def test_local_folders_feed_the_merge_page(qtbot, window, models):
    page = window.models
    page.tabs.setCurrentIndex(2)
    page.folders.add_local_folder(str(models.tune_a))
    assert page.folders.local_list.count() == 1
    page.folders.add_local_folder(str(models.base.parent / "tune-a"))  # again: listed once
    assert page.folders.local_list.count() == 1
    page.folders.local_list.setCurrentRow(0)
    qtbot.mouseClick(page.folders.local_add_button, Qt.MouseButton.LeftButton)
    assert window.current_page() == "merge"
    assert window.merge.table.cellWidget(0, 0).text() == str(models.tune_a)


def test_choosing_the_folder_that_holds_the_models_adds_them_all(qtbot, window, models, tmp_path):
    page = window.models
    page.tabs.setCurrentIndex(2)
    page.folders.add_local_folder(str(models.base.parent))  # the folder the user keeps their models in
    listed = [page.folders.local_list.item(row).text() for row in range(page.folders.local_list.count())]
    assert listed == sorted(listed, key=lambda p: p.rsplit("/", 1)[1]) and str(models.tune_b) in listed
    assert len(listed) == 7 and "Added 7 model folders from" in page.folders.local_status.text()
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    page.folders.add_local_folder(str(tmp_path / "empty"))  # neither a model nor a folder of models
    assert "none of the folders in it does" in page.folders.local_status.text()
    assert page.folders.local_list.count() == 7


def test_the_add_folder_dialog_opens_at_home_then_where_the_user_last_chose(qtbot, window, models, monkeypatch,
                                                                           tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    folders = window.models.folders
    folders.add_local_folder()
    assert Path(folders.folder_dialog.directory().absolutePath()) == tmp_path  # not the app's own folder
    folders.folder_dialog.reject()
    folders.add_local_folder(str(models.tune_a))
    folders.add_local_folder()
    assert Path(folders.folder_dialog.directory().absolutePath()) == models.tune_a.parent.resolve()
    folders.folder_dialog.selectFile(str(models.base))
    folders.folder_dialog.accept()
    assert str(models.base.resolve()) in [folders.local_list.item(r).text() for r in range(folders.local_list.count())]


def test_details_of_a_model_that_left_the_results_are_cleared(qtbot, window, hub_env, models):
    _catalogue(hub_env, models)
    page = _search(qtbot, window, "tiny")
    rows = {page.hub.results.item(r, 0).text(): r for r in range(page.hub.results.rowCount())}
    page.hub.results.selectRow(rows["smith/tiny-gated"])
    qtbot.waitUntil(lambda: "Licence" in page.details_pane.detail_facts.text(), timeout=15_000)
    qtbot.keyClicks(page.hub.search_edit, "-chat")
    qtbot.waitUntil(lambda: page.hub.results.rowCount() == 1, timeout=15_000)
    assert page.details_pane.detail_title.text() == "Select a model to see its details."
    assert page.details_pane.detail_facts.text() == "" and not page.details_pane.add_button.isEnabled()


def test_several_results_name_their_base():
    from guiapp.hub.search import ModelSummary
    from guiapp.ui.pages.model_details import base_of_the_others

    summary = ModelSummary("org/chat", "org", 0, 0, None, None, None, False, None,
                           tags=("license:mit", "base_model:org/b", "base_model:finetune:org/b"))
    assert summary.declared_bases == ("org/b",)
    chat, code, base = ("org/chat", ("org/b",)), ("org/code", ("org/b",)), ("org/b", ())
    assert base_of_the_others([chat, base, code]) == "org/b"
    assert base_of_the_others([chat, code]) is None  # neither is the other's base
