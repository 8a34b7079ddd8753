"""The Merge page's Advanced section: the result's tokenizer and chat template chosen in plain words, written to
the recipe (with undo), and read back from it; a template of the recipe's own survives form edits."""

from __future__ import annotations

import pytest
import yaml
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

JINJA = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`): these tests edit the Merge page's recipe, which it puts back."""
    return shared_window


def _yaml(page):
    return yaml.safe_load(page.yaml_edit.toPlainText())


def _choose(combo, value):
    """Pick the entry holding `value`, as choosing it from the open list does (one change)."""
    combo.setCurrentIndex(combo.findData(value))


def _show_yaml(qtbot, page, recipe):
    page.yaml_edit.setPlainText(yaml.safe_dump(recipe, sort_keys=False))
    qtbot.waitUntil(lambda: page.table.rowCount() == len(recipe["models"]), timeout=5_000)  # applied to the form


def _start(qtbot, page, models):
    _show_yaml(qtbot, page, {"merge_method": "linear", "base_model": str(models.base),
                             "models": [{"model": str(models.tune_a), "parameters": {"weight": 0.5}},
                                        {"model": str(models.tune_b), "parameters": {"weight": 0.5}}]})
    qtbot.mouseClick(page.advanced.advanced_button, Qt.MouseButton.LeftButton)


def test_tokenizer_and_chat_template_choices_write_the_recipe_with_undo(qtbot, window, models):
    page = window.merge
    _start(qtbot, page, models)
    box = page.advanced
    labels = [box.tokenizer_combo.itemText(i) for i in range(box.tokenizer_combo.count())]
    assert labels[1:] == ["The base model's", "Union of all the models' vocabularies", "From model…"]
    _choose(box.tokenizer_combo, "union")
    assert _yaml(page)["tokenizer_source"] == "union"
    _choose(box.chat_template_combo, "chatml")
    assert _yaml(page)["chat_template"] == "chatml"
    assert page.undo() and "chat_template" not in _yaml(page)
    assert box.chat_template_combo.currentData() == "" and box.tokenizer_combo.currentData() == "union"
    assert page.undo() and "tokenizer_source" not in _yaml(page)
    assert box.tokenizer_combo.currentData() == ""

    _choose(box.tokenizer_combo, "model")
    assert box.tokenizer_model.isVisibleTo(box)
    qtbot.keyClicks(box.tokenizer_model, str(models.tune_b))
    assert _yaml(page)["tokenizer_source"] == str(models.tune_b)


def test_the_recipe_choices_are_shown_and_its_own_template_is_kept(qtbot, window, models):
    page = window.merge
    _show_yaml(qtbot, page, {
        "merge_method": "linear", "models": [{"model": str(models.tune_a), "parameters": {"weight": 0.5}},
                                             {"model": str(models.tune_b), "parameters": {"weight": 0.5}}],
        "tokenizer_source": str(models.tune_b), "chat_template": JINJA})
    box = page.advanced
    assert box.tokenizer_combo.currentData() == "model" and box.tokenizer_model.text() == str(models.tune_b)
    assert box.chat_template_combo.currentText().startswith("Your own template")
    page.table.cellWidget(0, 1).spin.setValue(0.25)  # an edit in the form keeps the recipe's template
    recipe = _yaml(page)
    assert recipe["chat_template"] == JINJA and recipe["tokenizer_source"] == str(models.tune_b)
    assert recipe["models"][0]["parameters"]["weight"] == 0.25


def _press(qtbot, button) -> None:
    """Press `button` from the keyboard, as Tab and Space do (the section has just opened and grows as rows are
    added, so its buttons' places are not yet settled for a mouse click)."""
    button.setFocus()
    qtbot.keyClick(button, Qt.Key.Key_Space)


def test_slices_are_edited_in_a_table_that_writes_the_recipes_slices(qtbot, window, models):
    page = window.merge
    window.show_page("merge")
    _start(qtbot, page, models)
    box = page.advanced
    help_texts = " ".join(label.text() for label in box.advanced.findChildren(QLabel))
    assert "“list”" not in help_texts and "“Per layer”" in help_texts  # only controls that exist are named
    slices = box.slices_table
    assert slices.isVisible() and not box.slices_edit.isVisible()  # a table, the YAML behind a button
    _press(qtbot, slices.add_button)
    name = slices.table.cellWidget(0, 0)
    assert name.hasFocus()
    qtbot.keyClicks(name, str(models.tune_a))
    qtbot.keyClick(name, Qt.Key.Key_Tab)
    to_layer = slices.table.cellWidget(0, 2)
    to_layer.selectAll()
    qtbot.keyClicks(to_layer, "2")
    for _ in range(2):  # the next layers, of the same model
        _press(qtbot, slices.add_button)
    expected = [{"sources": [{"model": str(models.tune_a), "layer_range": [0, 2]}]},
                {"sources": [{"model": str(models.tune_a), "layer_range": [2, 3]}]},
                {"sources": [{"model": str(models.tune_a), "layer_range": [3, 4]}]}]
    qtbot.waitUntil(lambda: _yaml(page).get("slices") == expected, timeout=5_000)
    assert not page.table.isEnabled()  # the models come from the slices now
    _press(qtbot, slices.table.cellWidget(1, 3))  # its ✕
    qtbot.waitUntil(lambda: _yaml(page).get("slices") == [expected[0], expected[2]], timeout=5_000)

    _press(qtbot, box.slices_yaml_button)  # Edit as YAML: the same slices as text
    assert box.slices_edit.isVisible() and not slices.isVisible()
    assert yaml.safe_load(box.slices_edit.toPlainText()) == [expected[0], expected[2]]
    two_models = [{"sources": [{"model": str(models.tune_a), "layer_range": [0, 2]},
                               {"model": str(models.tune_b), "layer_range": [0, 2]}]}]
    box.slices_edit.setPlainText(yaml.safe_dump(two_models))
    qtbot.waitUntil(lambda: _yaml(page).get("slices") == two_models, timeout=5_000)
    assert box.slices_yaml_note.isVisible() and not box.slices_yaml_button.isVisible()  # says why it is text
    box.slices_edit.setPlainText(yaml.safe_dump(expected[:1]))
    _press(qtbot, box.slices_yaml_button)  # back to the table, which followed
    assert slices.isVisible() and slices.rows() == [(str(models.tune_a), 0, 2)]
