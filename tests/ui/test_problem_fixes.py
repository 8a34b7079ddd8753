"""The form can express its own fix. A problem that names a recipe key has "Show me" on the action bar,
which focuses and highlights the control that fixes it; where the fix is clear, a one-click "Fix" button makes it
and the recipe becomes valid (Run enabled). Fields the method does not use are disabled, the reason in their tip.

Everything is driven with real clicks on the action bar's buttons; the recipes come in through the YAML view, as
an imported or typed recipe would."""

from __future__ import annotations

import pytest
import yaml
from PySide6.QtCore import Qt

CHECK_MS = 30_000


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`): these tests edit the Merge page's recipe, which it puts back."""
    return shared_window


@pytest.fixture
def page(qtbot, window, tmp_path):
    window.show_page("merge")
    page = window.merge
    page.output_edit.setText(str(tmp_path / "merged"))
    return page


def _show(qtbot, page, recipe: dict) -> None:
    """Type `recipe` into the YAML view and wait for its check to block Run with a problem."""
    page.yaml_edit.setPlainText(yaml.safe_dump(recipe, sort_keys=False))
    bar = page.run_box.action_bar
    qtbot.waitUntil(lambda: bar.status.text().startswith("Fix: "), timeout=CHECK_MS)
    assert not bar.button.isEnabled()


def _show_me(qtbot, window, page):
    """Click "Show me" and return the widget that has the focus afterwards."""
    bar = page.run_box.action_bar
    assert bar.show_button.isVisible()
    qtbot.mouseClick(bar.show_button, Qt.MouseButton.LeftButton)
    focused = window.focusWidget()
    assert focused is not None and focused.property("attention") is True  # highlighted, not just focused
    return focused


def _fix(qtbot, page) -> str:
    """Click the one-click fix (returning its label) and wait until Run is enabled."""
    bar = page.run_box.action_bar
    assert bar.fix_button.isVisible()
    label = bar.fix_button.text()
    qtbot.mouseClick(bar.fix_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(bar.button.isEnabled, timeout=CHECK_MS)
    assert bar.status.text() == "Ready."
    return label


def _linear(*entries):
    return {"merge_method": "linear", "models": [{"model": str(m), **({"parameters": p} if p else {})}
                                                 for m, p in entries]}


def test_a_missing_weight_of_a_listed_model_shows_its_weight_box_and_sets_it(qtbot, window, page, models):
    _show(qtbot, page, _linear((models.tune_a, {"weight": 0.5}), (models.tune_b, None)))
    assert _show_me(qtbot, window, page) is page.table.cellWidget(1, 1).spin
    assert _fix(qtbot, page).startswith("Set Weight to 1 for tune-b")
    assert page.table.cellWidget(1, 1).value() == 1.0
    assert yaml.safe_load(page.yaml_edit.toPlainText())["models"][1]["parameters"] == {"weight": 1.0}


def test_linear_with_a_base_offers_to_give_the_base_a_weight(qtbot, window, page, models):
    recipe = _linear((models.tune_a, {"weight": 1}), (models.tune_b, {"weight": 1}))
    _show(qtbot, page, {**recipe, "base_model": str(models.base)})
    assert "base" in page.run_box.action_bar.fix_button.text()
    _fix(qtbot, page)
    rows = yaml.safe_load(page.yaml_edit.toPlainText())["models"]
    assert rows[-1] == {"model": str(models.base), "parameters": {"weight": 1.0}}
    assert page.table.rowCount() == 3  # the base has a row of its own now, its weight in sight
    page.undo()  # the fix is one undo step
    assert len(yaml.safe_load(page.yaml_edit.toPlainText())["models"]) == 2


def test_a_value_out_of_range_is_shown_and_brought_into_range(qtbot, window, page, models):
    _show(qtbot, page, {"merge_method": "ties", "base_model": str(models.base),
                        "models": [{"model": str(models.tune_a), "parameters": {"weight": 1, "density": -3}},
                                   {"model": str(models.tune_b), "parameters": {"weight": 1, "density": 0.5}}]})
    assert _show_me(qtbot, window, page) is page.table.cellWidget(0, 2).spin
    _fix(qtbot, page)
    assert page.table.cellWidget(0, 2).value() == 0.0


def test_a_missing_method_wide_parameter_shows_its_editor_and_sets_it(qtbot, window, page, models):
    _show(qtbot, page, {"merge_method": "slerp", "base_model": str(models.base),
                        "models": [{"model": str(models.base)}, {"model": str(models.tune_a)}]})
    assert _show_me(qtbot, window, page) is page.param_form.editors["t"].spin
    _fix(qtbot, page)
    assert yaml.safe_load(page.yaml_edit.toPlainText())["parameters"] == {"t": 0.5}  # the middle of 0…1


def test_a_missing_base_shows_the_base_field(qtbot, window, page, models):
    _show(qtbot, page, {"merge_method": "ties", "models": [
        {"model": str(models.tune_a), "parameters": {"weight": 1}},
        {"model": str(models.tune_b), "parameters": {"weight": 1}}]})
    assert _show_me(qtbot, window, page) is page.base_picker.combo
    assert not page.run_box.action_bar.fix_button.isVisible()  # which base is the user's to say


def test_a_model_that_cannot_be_found_shows_its_row(qtbot, window, page, models, tmp_path):
    _show(qtbot, page, _linear((models.tune_a, {"weight": 1}), (tmp_path / "no-such-model", {"weight": 1})))
    assert _show_me(qtbot, window, page) is page.table.cellWidget(1, 0)


def test_too_few_models_shows_where_to_add_one(qtbot, window, page, models):
    _show(qtbot, page, {"merge_method": "slerp", "base_model": str(models.base), "parameters": {"t": 0.5},
                        "models": [{"model": str(models.base)}]})
    assert _show_me(qtbot, window, page) is page.add_model_picker.combo


def test_an_unusable_output_dtype_shows_the_dropdown_and_falls_back_to_the_models(qtbot, window, page, models):
    _show(qtbot, page, {**_linear((models.tune_a, {"weight": 1}), (models.tune_b, {"weight": 1})),
                        "out_dtype": "int4"})
    assert _show_me(qtbot, window, page) is page.dtype_combo
    _fix(qtbot, page)
    assert "out_dtype" not in yaml.safe_load(page.yaml_edit.toPlainText())


def test_an_unusable_dtype_shows_its_line_in_the_recipe_and_removes_it(qtbot, window, page, models):
    _show(qtbot, page, {**_linear((models.tune_a, {"weight": 1}), (models.tune_b, {"weight": 1})),
                        "dtype": "int4"})
    assert _show_me(qtbot, window, page) is page.yaml_edit  # the form has no field for it: the recipe's line
    assert page.yaml_edit.textCursor().block().text().startswith("dtype:")
    _fix(qtbot, page)
    assert "dtype" not in yaml.safe_load(page.yaml_edit.toPlainText())


def test_a_tokenizer_model_that_cannot_be_found_shows_the_tokenizer_field(qtbot, window, page, models, tmp_path):
    _show(qtbot, page, {**_linear((models.tune_a, {"weight": 1}), (models.tune_b, {"weight": 1})),
                        "tokenizer_source": str(tmp_path / "no-tokenizer-here")})
    assert _show_me(qtbot, window, page) is page.advanced.tokenizer_model
    assert page.advanced.advanced.isVisible()  # the folded section opened to show it


def test_the_bases_own_values_are_disabled_where_the_method_does_not_use_them(qtbot, window, page, models):
    page.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "ties", "base_model": str(models.base), "models": [
        {"model": str(models.base)}, {"model": str(models.tune_a), "parameters": {"weight": 1}}]}, sort_keys=False))
    qtbot.waitUntil(lambda: page.table.rowCount() == 2, timeout=CHECK_MS)
    base_weight, tune_weight = page.table.cellWidget(0, 1), page.table.cellWidget(1, 1)
    assert not base_weight.isEnabled() and "base" in base_weight.toolTip()
    assert tune_weight.isEnabled()
    page.method_combo.setCurrentIndex(page.method_combo.findData("linear"))  # linear merges the base as an input
    qtbot.waitUntil(lambda: page.table.cellWidget(0, 1).isEnabled(), timeout=CHECK_MS)


def test_a_keys_line_is_found_in_the_yaml():
    from guiapp.ui.merge.problem_control import yaml_position

    text = ("merge_method: ties\nmodels:\n- model: a\n  parameters:\n    weight: 1\n- model: b\n  parameters:\n"
            "    weight: 2\ntokenizer:\n  source: base\ndtype: int4\n")
    line = lambda key: text[:yaml_position(text, key)].count("\n")  # noqa: E731 - a one-line helper
    assert line(("dtype",)) == 10 and line(("tokenizer", "source")) == 9
    assert line(("models", 1, "parameters", "weight")) == 7
    assert yaml_position(text, ("chat_template",)) is None
