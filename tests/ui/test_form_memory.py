"""Work survives a restart (the recipe being edited, the LoRA forms), File → New merge clears the recipe and
Edit → Undo brings it back, and Apply LoRA takes the base from the adapter's own config."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtTest import QTest

from guiapp.jobs.form_memory import remember_form, remembered_form


def _fill_recipe(qtbot, page, models) -> None:
    page.method_box.select("ties")
    page.base_picker.set_text(str(models.base))
    for model in (models.tune_a, models.tune_b):
        qtbot.keyClicks(page.add_model_picker.combo.lineEdit(), str(model))
        qtbot.mouseClick(page.add_model_button, Qt.MouseButton.LeftButton)


def test_the_recipe_and_the_lora_forms_survive_a_restart(qtbot, make_window, models, tmp_path):
    window = make_window()
    page = window.merge
    _fill_recipe(qtbot, page, models)
    page.output_edit.setText(str(tmp_path / "kept-output"))
    page.overwrite_check.setChecked(True)
    recipe = page.recipe.copy()
    assert [m["model"] for m in recipe["models"]] == [str(models.tune_a), str(models.tune_b)]
    window.lora.extract.model.set_text(str(models.tune_a))
    window.lora.extract.rank_mode.setCurrentIndex(window.lora.extract.rank_mode.findData("energy"))
    window.lora.extract.rank_value.setValue(0.8)
    window.lora.apply.out.setText(str(tmp_path / "applied"))
    window.close()

    again = make_window()
    assert again is not window
    assert again.merge.document == recipe
    assert again.merge.base_picker.text() == str(models.base)
    assert again.merge.table.rowCount() == 2
    assert again.merge.output_edit.text() == str(tmp_path / "kept-output")
    assert not again.merge.overwrite_check.isChecked()  # "Replace" is never carried over
    assert again.lora.extract.model.text() == str(models.tune_a)
    assert again.lora.extract.rank_mode.currentData() == "energy" and again.lora.extract.rank_value.value() == 0.8
    assert again.lora.apply.out.text() == str(tmp_path / "applied")


def test_the_try_page_keeps_its_models_prompt_and_settings_across_a_restart(qtbot, make_window, models):
    window = make_window()
    page = window.try_page
    qtbot.keyClicks(page.pickers[0].combo.lineEdit(), str(models.tune_a))
    page.pickers[1].set_text(f"{models.base}+{models.tune_b}")
    qtbot.keyClicks(page.prompt, "Once upon a time")
    page.decoding.setCurrentIndex(page.decoding.findData(True))
    page.seed.setValue(7)
    page.temperature.setValue(0.7)
    page.window_tokens.setValue(256)
    page.text.setPlainText("a short text to score")
    page.tabs.setCurrentIndex(1)
    window.close()

    again = make_window().try_page
    assert again.references() == [str(models.tune_a), f"{models.base}+{models.tune_b}"]
    assert again.prompt.toPlainText() == "Once upon a time" and again.text.toPlainText() == "a short text to score"
    assert again.decoding.currentData() is True and again.seed.value() == 7 and again.temperature.value() == 0.7
    assert again.window_tokens.value() == 256 and again.tabs.currentIndex() == 1


def test_perplexity_rows_about_other_models_go_when_the_models_change(qtbot, window, models):
    page = window.try_page
    page.set_models([str(models.tune_a), str(models.tune_b)])
    page._show_results({"results": [{"model": str(m), "perplexity": 250.0, "tokens": 10, "dtype": "float32"}
                                    for m in (models.tune_a, models.tune_b)]})
    assert page.table.rowCount() == 2
    page.pickers[1].set_text(str(models.tune_b))  # the same models: the scores stay
    assert page.table.rowCount() == 2
    qtbot.keyClicks(page.pickers[1].combo.lineEdit(), "-2")  # another model: the scores go with it
    assert page.table.rowCount() == 0 and page.chart.values == []


def test_new_merge_clears_the_form_and_undo_brings_it_back(qtbot, window, models):
    page = window.merge
    _fill_recipe(qtbot, page, models)
    before = page.recipe.copy()
    window.activateWindow()  # shortcuts reach an active window only
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)
    window.show_page("models")
    qtbot.keySequence(window, QKeySequence(QKeySequence.StandardKey.New))
    assert window.current_page() == "merge"  # New merge shows the page it empties
    assert page.table.rowCount() == 0 and page.base_picker.text() == ""
    assert page.document == {"merge_method": "ties"}
    assert "Undo" in window.statusBar().currentMessage()
    page.method_combo.setFocus()  # not a text field, whose own undo would take Ctrl+Z
    qtbot.keySequence(window, QKeySequence(QKeySequence.StandardKey.Undo))
    assert page.document == before
    assert page.table.rowCount() == 2 and page.base_picker.text() == str(models.base)
    qtbot.keySequence(window, QKeySequence(QKeySequence.StandardKey.Redo))
    assert page.document == {"merge_method": "ties"}


def test_apply_takes_the_base_from_the_adapter_config(qtbot, window, tmp_path):
    adapter = tmp_path / "my-adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/the-base"}))
    page = window.lora
    page.tabs.setCurrentIndex(1)
    qtbot.keyClicks(page.apply.adapter.combo.lineEdit(), str(adapter))
    assert page.apply.base.text() == "org/the-base"
    # a base the user chose is never replaced
    page.apply.base.set_text("")
    QTest.keyClicks(page.apply.base.combo.lineEdit(), "org/my-choice")
    page.apply.adapter.set_text(str(adapter))
    assert page.apply.base.text() == "org/my-choice"


def test_a_damaged_forms_file_is_an_empty_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(tmp_path))
    (tmp_path / "forms.json").write_text("{not json")
    assert remembered_form("merge") == {}
    remember_form("merge", {"recipe": {"merge_method": "linear"}, "hf_token": "hf_secret"})
    assert remembered_form("merge") == {"recipe": {"merge_method": "linear"}}
