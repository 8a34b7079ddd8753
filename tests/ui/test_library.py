"""The window's one live model library: what a job finishing puts on disk appears in every picker and on the
Models page without a restart, and a deletion takes it away everywhere."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMessageBox

from guiapp.ui.library_model import REFERENCE_ROLE
from tests.ui.conftest import wait_for_job


def _listed(picker) -> list[str]:
    return [picker.combo.itemData(row, REFERENCE_ROLE) for row in range(picker.combo.count())]


def test_a_finished_download_appears_in_the_merge_and_lora_pickers(qtbot, window, hub_env, models):
    from guiapp.jobs.specs import download_job

    hub_env.server.add_model("smith/tiny-base", models.base)
    qtbot.waitUntil(lambda: window.state.library.loaded, timeout=15_000)
    assert "smith/tiny-base" not in _listed(window.merge.base_picker)
    window.merge.base_picker.set_text("typed by the user")
    record = window.state.jobs.submit(download_job("smith/tiny-base"))
    assert wait_for_job(qtbot, window, record.key).status == "done"
    qtbot.waitUntil(lambda: "smith/tiny-base" in _listed(window.merge.base_picker), timeout=15_000)
    for picker in (window.merge.add_model_picker, window.lora.extract.base, window.lora.extract.model, window.try_page.pickers[0]):
        assert "smith/tiny-base" in _listed(picker)
    assert "smith/tiny-base" not in _listed(window.lora.apply.adapter)  # a model is not offered as an adapter
    assert window.merge.base_picker.text() == "typed by the user"  # the refresh keeps what was typed
    # and it can be chosen from the list with the keyboard
    window.show_page("merge")
    picker = window.merge.base_picker
    picker.set_text("")
    picker.combo.setFocus()
    QTest.keyClick(picker.combo, Qt.Key.Key_Down, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(picker.combo.view().isVisible, timeout=5_000)
    row = _listed(picker).index("smith/tiny-base")
    picker.combo.view().setCurrentIndex(picker.combo.model().index(row, 0))
    QTest.keyClick(picker.combo.view(), Qt.Key.Key_Return)
    assert picker.text() == "smith/tiny-base"
    assert window.merge.document["base_model"] == "smith/tiny-base"


def test_a_finished_merge_adds_its_output_to_the_library(qtbot, window, models, tmp_path):
    from guiapp.jobs.specs import merge_job
    from guiapp.merging.recipe import recipe_from_dict

    output = tmp_path / "tune-a+tune-b-linear"
    recipe = recipe_from_dict({"merge_method": "linear", "models": [
        {"model": str(models.tune_a), "parameters": {"weight": 0.5}},
        {"model": str(models.tune_b), "parameters": {"weight": 0.5}}]})
    qtbot.waitUntil(lambda: window.state.library.loaded, timeout=15_000)
    record = window.state.jobs.submit(merge_job(recipe, output))
    assert wait_for_job(qtbot, window, record.key).status == "done"
    qtbot.waitUntil(lambda: str(output) in _listed(window.merge.add_model_picker), timeout=15_000)
    entry = window.state.library.find(str(output))
    assert entry.where == "Made by Mergesmith" and entry.kind == "model"
    tab = window.models.downloaded
    assert tab.select_reference(str(output))
    assert "1 model on this computer" in tab.cache_status.text()
    # What Mergesmith made can be deleted from here, after a question that says what and how much.
    asked = []

    def answer_delete() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(50, answer_delete)
            return
        asked.append(box.text())
        box.button(QMessageBox.StandardButton.Yes).click()

    assert tab.delete_button.isEnabled()
    QTimer.singleShot(0, answer_delete)
    qtbot.mouseClick(tab.delete_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not output.exists(), timeout=15_000)
    assert "tune-a+tune-b-linear" in asked[0] and "merge output" in asked[0] and "cannot be undone" in asked[0]
    qtbot.waitUntil(lambda: str(output) not in _listed(window.merge.add_model_picker), timeout=15_000)
    assert "Deleted tune-a+tune-b-linear" in tab.cache_status.text()
    assert models.tune_a.is_dir() and models.tune_b.is_dir()  # its inputs are untouched


def test_a_finished_extraction_offers_its_adapter_only_where_adapters_go(qtbot, window, models, tmp_path):
    from guiapp.jobs.specs import extract_job

    adapter = tmp_path / "tune-a-lora-r4"
    qtbot.waitUntil(lambda: window.state.library.loaded, timeout=15_000)
    record = window.state.jobs.submit(extract_job(str(models.base), str(models.tune_a), adapter, rank_value=4))
    assert wait_for_job(qtbot, window, record.key).status == "done"
    qtbot.waitUntil(lambda: str(adapter) in _listed(window.lora.apply.adapter), timeout=15_000)
    assert str(adapter) not in _listed(window.merge.base_picker)
    assert window.state.library.find(str(adapter)).base_model == str(models.base)


def test_the_sample_models_join_the_library(qtbot, window, tmp_path):
    window.welcome.try_samples(tmp_path / "samples")
    qtbot.waitUntil(lambda: window.current_page() == "merge", timeout=60_000)
    samples = [str((tmp_path / "samples" / name).resolve()) for name in ("tiny-base", "tiny-math", "tiny-chat")]
    qtbot.waitUntil(lambda: all(s in _listed(window.merge.add_model_picker) for s in samples), timeout=15_000)


def test_search_results_mark_what_is_downloaded(qtbot, window, hub_env, models):
    from guiapp.jobs.specs import download_job

    hub_env.server.add_model("smith/tiny-base", models.base)
    hub_env.server.add_model("smith/tiny-chat", models.tune_a)
    record = window.state.jobs.submit(download_job("smith/tiny-base"))
    assert wait_for_job(qtbot, window, record.key).status == "done"
    qtbot.waitUntil(lambda: window.state.library.find("smith/tiny-base") is not None, timeout=15_000)
    window.show_page("models")
    page = window.models.hub
    qtbot.keyClicks(page.search_edit, "tiny")
    qtbot.waitUntil(lambda: page.results.rowCount() == 2, timeout=15_000)
    fit = {page.results.item(row, 0).text(): page.results.item(row, 3).text() for row in range(2)}
    assert fit == {"smith/tiny-base": "✓ Downloaded", "smith/tiny-chat": "Fits"}
    window.models.details_pane.open_details("smith/tiny-base")
    qtbot.waitUntil(lambda: window.models.details_pane.fit_badge.text() != "", timeout=15_000)
    assert window.models.details_pane.fit_badge.text().startswith("● Fits this machine: downloaded")
