"""The Merge page speaks of the recipe in the form's words: a value's problem names the control's label and the
model's short name (no recipe key, path or tensor name); the form and the recipe never disagree about a value
out of range, which is said in place rather than changed; a value far outside its usual range gets a warning; and
an output folder inside an input model has a one-click fix."""

from __future__ import annotations

import pytest
import yaml
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`): these tests edit the Merge page's recipe, which it puts back."""
    return shared_window


def _ties(models, density_a=0.5):
    return {"merge_method": "ties", "base_model": str(models.base),
            "models": [{"model": str(models.tune_a), "parameters": {"weight": 0.5, "density": density_a}},
                       {"model": str(models.tune_b), "parameters": {"weight": 0.5, "density": 0.5}}]}


def _show(qtbot, window, recipe, output):
    page = window.merge
    window.show_page("merge")
    page.output_edit.setText(str(output))
    page.yaml_edit.setPlainText(yaml.safe_dump(recipe, sort_keys=False))
    page.recipe_panel.flush()
    return page


def test_a_value_out_of_range_is_said_in_the_forms_words_and_kept_as_written(qtbot, window, models, tmp_path):
    page = _show(qtbot, window, _ties(models, density_a=-0.5), tmp_path / "out")
    status = page.run_box.action_bar.status
    qtbot.waitUntil(lambda: status.text().startswith("Fix:"), timeout=30_000)
    for text in (status.text(), page.models_message.text()):
        assert "Keep this fraction of changes" in text and "tune-a" in text, text
        assert "`" not in text and str(models.tune_a) not in text and "tensor" not in text, text
    density = page.table.editor(0, "density")
    assert density.spin.value() == -0.5  # shown as written, not clamped to 0
    assert density.spin.property("status") == "problem" and "at least 0" in density.spin.toolTip()
    assert page.document["models"][0]["parameters"]["density"] == -0.5


def test_typing_a_value_out_of_range_reaches_the_recipe_as_typed(qtbot, window, models, tmp_path):
    page = _show(qtbot, window, _ties(models), tmp_path / "out")
    spin = page.table.editor(1, "density").spin
    qtbot.mouseClick(spin, Qt.MouseButton.LeftButton)
    spin.selectAll()
    qtbot.keyClicks(spin.lineEdit(), "-0.5")
    qtbot.keyClick(spin, Qt.Key.Key_Tab)
    assert spin.value() == -0.5
    assert page.document["models"][1]["parameters"]["density"] == -0.5
    assert "density: -0.5" in page.yaml_edit.toPlainText()
    status = page.run_box.action_bar.status
    qtbot.waitUntil(lambda: status.text().startswith("Fix:"), timeout=30_000)
    assert "tune-b" in status.text() and not page.run_button.isEnabled()
    qtbot.mouseClick(page.run_box.action_bar.fix_button, Qt.MouseButton.LeftButton)  # the nearest allowed value
    spin = page.table.editor(1, "density").spin  # the table shows the fixed recipe
    assert page.document["models"][1]["parameters"]["density"] == 0.0 and spin.value() == 0.0
    assert spin.property("status") != "problem"


def test_a_value_far_outside_its_usual_range_gets_a_warning(qtbot, window, models, tmp_path):
    recipe = {"merge_method": "della", "base_model": str(models.base),
              "models": [{"model": str(m), "parameters": {"weight": 0.5, "density": 0.5, "epsilon": 0.1}}
                         for m in (models.tune_a, models.tune_b)],
              "parameters": {"lambda": 50.0}}
    page = _show(qtbot, window, recipe, tmp_path / "out")
    qtbot.waitUntil(page.run_button.isEnabled, timeout=30_000)  # a warning, not a refusal
    text = page.params_message.text()
    assert page.params_message.isVisible() and "Scale the result (λ)" in text and "50" in text, text
    assert page.params_message.property("status") == "warning"

    recipe["parameters"]["lambda"] = 1.2
    page.yaml_edit.setPlainText(yaml.safe_dump(recipe, sort_keys=False))
    page.recipe_panel.flush()
    qtbot.waitUntil(lambda: not page.params_message.isVisible(), timeout=30_000)


def test_an_output_folder_inside_an_input_model_has_a_free_folder_beside_the_inputs_to_click(qtbot, window, models,
                                                                                          tmp_path):
    page = _show(qtbot, window, _ties(models), models.tune_a / "merged")
    bar = page.run_box.action_bar
    qtbot.waitUntil(lambda: bar.status.text().startswith("Fix:"), timeout=30_000)
    assert "inside" in bar.status.text() and bar.show_button.isVisible()
    assert bar.fix_button.isVisible() and bar.fix_button.text().endswith("beside the models")
    qtbot.mouseClick(bar.fix_button, Qt.MouseButton.LeftButton)
    chosen = page.output_edit.text()
    assert chosen == str(models.tune_a.parent / "merged") or chosen.startswith(str(models.tune_a.parent / "merged-"))
    qtbot.waitUntil(page.run_button.isEnabled, timeout=30_000)
    assert QApplication.focusWidget() is not None
