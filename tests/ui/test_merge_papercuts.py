"""The models table fits the Merge page's width: no sideways scrolling to reach a model's Remove button, the
model's name column stays in view, at the default window size and at the smallest one."""

from __future__ import annotations

import time

import pytest
import yaml
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QScrollArea


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`): these tests edit the Merge page's recipe, which it puts back."""
    return shared_window


def _three_model_ties(qtbot, page, models) -> None:
    page.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "ties", "base_model": str(models.base), "models": [
        {"model": str(model), "parameters": {"weight": 0.5, "density": 0.5}}
        for model in (models.tune_a, models.tune_b, models.wider)]}))
    qtbot.waitUntil(lambda: page.table.rowCount() == 3, timeout=10_000)


def _settled(qtbot, read, steady_for: float = 0.3):
    """What `read()` gives once it has stayed the same for `steady_for` seconds (the layout has settled)."""
    last, since = read(), time.monotonic()

    def steady() -> bool:
        nonlocal last, since
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        return time.monotonic() - since >= steady_for

    qtbot.waitUntil(steady, timeout=10_000)
    return last


@pytest.mark.parametrize("size", [(1280, 860), (1024, 700)])
def test_the_models_table_needs_no_sideways_scrolling(qtbot, window, models, size):
    window.resize(*size)
    window.show_page("merge")
    page = window.merge
    _three_model_ties(qtbot, page, models)
    qtbot.waitUntil(lambda: window.width() == size[0], timeout=5_000)
    table = page.table
    # tall enough for its three rows once the layout has settled
    qtbot.waitUntil(lambda: table.viewport().height() >= sum(table.rowHeight(r) for r in range(3)), timeout=5_000)
    assert table.horizontalHeader().length() <= table.viewport().width()
    assert not table.horizontalScrollBar().isVisible()
    viewport = table.viewport().rect()
    for row in range(3):
        remove = table.cellWidget(row, table.columnCount() - 1)
        corner = remove.mapTo(table.viewport(), QPoint(remove.width() - 1, remove.height() - 1))
        assert viewport.contains(remove.mapTo(table.viewport(), QPoint(0, 0))) and viewport.contains(corner)
        name = table.cellWidget(row, 0)
        assert name.width() >= 100  # enough of the name to tell the models apart (elided in the middle)
    qtbot.mouseClick(page.advanced.advanced_button, Qt.MouseButton.LeftButton)  # the slices editor open too
    qtbot.mouseClick(page.advanced.slices_table.add_button, Qt.MouseButton.LeftButton)
    scroll = page.findChildren(QScrollArea)[0]
    qtbot.waitUntil(lambda: scroll.widget().minimumSizeHint().width() <= scroll.viewport().width(), timeout=5_000)


def test_a_per_layer_value_is_said_in_words_beside_its_chart_and_the_list_is_one_click_away(qtbot, window, models):
    window.show_page("merge")
    page = window.merge
    _three_model_ties(qtbot, page, models)
    density = page.table.editor(0, "density")
    density.layers_choice.setFocus()
    qtbot.keyClick(density.layers_choice, Qt.Key.Key_Down)  # Per layer
    qtbot.waitUntil(lambda: density.gradient_view.isVisible(), timeout=5_000)
    assert not density.text.isVisible()  # no raw "[0.5, 0.5]"
    assert density.summary.isVisible() and density.summary.text() == "0.5 → 0.5"
    assert "0.5 at the first layer → 0.5 at the last" in density.summary.toolTip()
    density.set_gradient([0.2, 0.6, 0.9])  # as a drag on the chart writes it
    assert density.summary.text() == "0.2 → 0.6 → 0.9"
    qtbot.mouseClick(density.summary, Qt.MouseButton.LeftButton)  # to type the list
    assert density.text.isVisible() and density.text.hasFocus() and density.text.text() == "[0.2, 0.6, 0.9]"
    density.text.clear()
    qtbot.keyClicks(density.text, "[{filter: mlp, value: 0.5}, {value: 0.3}]")
    assert density.text.isVisible() and not density.summary.isVisible()  # filters are shown as written


def test_the_compatibility_line_coming_and_going_moves_neither_the_table_nor_run(qtbot, window, models, tmp_path):
    window.resize(1280, 860)
    window.show_page("merge")
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "ties", "base_model": str(models.base), "models": [
        {"model": str(model), "parameters": {"weight": 0.5, "density": 0.5}}
        for model in (models.tune_a, models.tune_b, models.base)]}))
    qtbot.waitUntil(lambda: page.compatibility.text().startswith("✓ Compatible"), timeout=20_000)

    def places():
        return [(w.mapTo(window, QPoint(0, 0)), w.size()) for w in (page.table, page.run_button,
                                                                     page.param_form, page.compatibility)]

    compatible = _settled(qtbot, places)  # after the resize and the new rows are laid out, on a busy machine too
    page.models_box.show_verdict(type("Check", (), {"compatible": None})())  # a check that could not tell
    assert page.compatibility.text() == ""
    qtbot.wait(100)
    assert places() == compatible  # nothing below the line moves either: its room stays reserved
    reference = page.table.reference_widget(2)
    reference.setFocus()
    reference.selectAll()
    qtbot.keyClicks(reference, str(tmp_path / "no-such-model"))
    qtbot.waitUntil(lambda: page.compatibility.text().startswith("✗"), timeout=20_000)
    qtbot.wait(100)
    assert places()[:2] == compatible[:2]  # the problem is said below the table, which stays where it was
