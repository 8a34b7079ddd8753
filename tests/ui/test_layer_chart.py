"""The picture of a parameter that changes across the layers: dragging a point changes the recipe's list (the
document, the YAML view), one undo step per drag; the line follows the models' layers once they are read."""

from __future__ import annotations

import pytest
import yaml
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest

from guiapp.ui.widgets import layer_chart


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`): these tests edit the Merge page's recipe, which it puts back."""
    return shared_window


def _recipe(page):
    return yaml.safe_load(page.yaml_edit.toPlainText())


def _drag(chart, start: QPoint, end: QPoint) -> None:
    viewport = chart.plot.viewport()
    QTest.mousePress(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start)
    middle = QPoint((start.x() + end.x()) // 2, (start.y() + end.y()) // 2)
    for point in (middle, end):
        QTest.mouseMove(viewport, point)
    QTest.mouseRelease(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, end)


def _wait_drawn(qtbot, chart) -> None:
    qtbot.waitUntil(lambda: chart.isVisible() and chart.plot is not None and chart.plot.viewport().height() > 80,
                    timeout=10_000)


@pytest.fixture
def slerp_page(qtbot, window, models):
    layer_chart.set_layer_count(0)  # another test's models may have set it
    window.show_page("merge")
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "slerp", "base_model": str(models.tune_a),
        "models": [{"model": str(models.tune_a)}, {"model": str(models.tune_b)}],
        "parameters": {"t": [0.0, 0.5, 1.0]}}, sort_keys=False))
    qtbot.waitUntil(lambda: page.method_combo.currentData() == "slerp"
                    and "t" in page.param_form.editors and page.param_form.editors["t"].varies_by_layer(),
                    timeout=10_000)
    return page


def test_dragging_a_point_changes_the_recipe_list_and_undo_takes_it_back(qtbot, slerp_page):
    page = slerp_page
    editor = page.param_form.editors["t"]
    chart = editor.gradient_view
    _wait_drawn(qtbot, chart)
    qtbot.waitUntil(lambda: chart.layer_count == 2, timeout=60_000)  # the check read the models' 2 layers
    assert [c.anchors for c in chart.curves] == [(0.0, 0.5, 1.0)]
    assert chart.curves[0].layer_values == (0.0, 1.0)  # the engine's interpolation at layers 0 and 1
    start = chart.anchor_pixel(0, 1).toPoint()
    target = chart.to_pixel(1.0, 0.8).toPoint()  # straight up, to 0.8
    _drag(chart, start, QPoint(start.x(), target.y()))
    dragged = page.recipe.data["parameters"]["t"]
    assert dragged[0] == 0.0 and dragged[2] == 1.0 and dragged[1] == pytest.approx(0.8, abs=0.03)
    assert _recipe(page)["parameters"]["t"] == dragged  # the YAML view shows it
    assert editor.value() == dragged and chart.curves[0].anchors[1] == dragged[1]
    assert page.undo()
    assert page.recipe.data["parameters"]["t"] == [0.0, 0.5, 1.0]
    assert _recipe(page)["parameters"]["t"] == [0.0, 0.5, 1.0]
    shown = page.param_form.editors["t"].gradient_view  # the form may have rebuilt its editors
    assert [c.anchors for c in shown.curves] == [(0.0, 0.5, 1.0)]


def test_a_press_away_from_the_points_changes_nothing(qtbot, slerp_page):
    page = slerp_page
    chart = page.param_form.editors["t"].gradient_view
    _wait_drawn(qtbot, chart)
    before = page.recipe.copy()
    start = chart.to_pixel(0.25, 0.9).toPoint()  # above the line, between two points
    _drag(chart, start, start + QPoint(0, 30))
    assert page.recipe.data == before


def test_each_filter_gets_a_curve_and_its_own_points(qtbot, slerp_page):
    page = slerp_page
    value = [{"filter": "self_attn", "value": [0.0, 1.0]}, {"filter": "mlp", "value": [1.0, 0.0]}, {"value": 0.5}]
    page.yaml_edit.setPlainText(yaml.safe_dump({**page.recipe.copy(), "parameters": {"t": value}}, sort_keys=False))
    qtbot.waitUntil(lambda: [c.label for c in page.param_form.editors["t"].gradient_view.curves]
                    == ["self_attn", "mlp", "other tensors"], timeout=10_000)
    chart = page.param_form.editors["t"].gradient_view
    _wait_drawn(qtbot, chart)
    start = chart.anchor_pixel(1, 0).toPoint()  # mlp at the first layer: 1.0, down to 0.3
    _drag(chart, start, QPoint(start.x(), chart.to_pixel(0, 0.3).toPoint().y()))
    changed = page.recipe.data["parameters"]["t"]
    assert changed[0] == value[0] and changed[2] == value[2]
    assert changed[1]["filter"] == "mlp" and changed[1]["value"][0] == pytest.approx(0.3, abs=0.03)
    assert _recipe(page)["parameters"]["t"] == changed


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshot(qtbot, slerp_page, scheme, chart_shots):
    from guiapp.ui.theme import apply_scheme

    apply_scheme(scheme)
    try:
        chart = slerp_page.param_form.editors["t"].gradient_view
        qtbot.waitUntil(lambda: chart.isVisible() and chart.layer_count == 2, timeout=30_000)
        assert chart.grab().save(str(chart_shots / f"layer-chart-{scheme}.png"))
    finally:
        apply_scheme("light")


def test_a_models_gradient_shows_its_chart_in_a_row_tall_enough(qtbot, window, models, chart_shots):
    window.show_page("merge")
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "linear",
        "models": [{"model": str(models.tune_a), "parameters": {"weight": [0.2, 0.9, 0.4]}},
                   {"model": str(models.tune_b), "parameters": {"weight": 0.5}}]}, sort_keys=False))
    qtbot.waitUntil(lambda: page.table.rowCount() == 2 and page.table.cellWidget(0, 1).varies_by_layer(),
                    timeout=10_000)
    chart = page.table.cellWidget(0, 1).gradient_view
    _wait_drawn(qtbot, chart)
    qtbot.waitUntil(lambda: page.table.rowHeight(0) >= page.table.cellWidget(0, 1).sizeHint().height(), timeout=5_000)
    assert [c.anchors for c in chart.curves] == [(0.2, 0.9, 0.4)]
    assert page.table.grab().save(str(chart_shots / "layer-chart-models-table.png"))


def test_a_long_list_is_written_on_one_line_in_its_box(qtbot):
    from guiapp.merging.methods import get_method
    from guiapp.ui.widgets.param_form import ParamEditor

    editor = ParamEditor(get_method("slerp").param("t"))
    qtbot.addWidget(editor)
    value = [{"filter": "self_attn", "value": [0, 0.5, 0.3, 0.7, 1]}, {"filter": "mlp", "value": [1, 0.5, 0.7, 0.3, 0]},
             {"value": 0.5}]
    editor.set_value(value)
    assert "  " not in editor.text.text() and editor.value() == value
    editor.set_gradient([*value, {"filter": "embed", "value": [0.25, 0.75]}])  # as a drag writes it
    assert "  " not in editor.text.text() and editor.value()[-1] == {"filter": "embed", "value": [0.25, 0.75]}


def test_the_models_table_grows_to_show_every_row_with_a_chart(qtbot, window, models):
    window.resize(1360, 860)
    window.show_page("merge")
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "ties", "base_model": str(models.base),
        "models": [{"model": str(models.tune_a), "parameters": {"weight": [0.3, 0.8], "density": 0.5}},
                   {"model": str(models.tune_b), "parameters": {"weight": 0.4, "density": 0.5}}]}, sort_keys=False))
    table = page.table
    qtbot.waitUntil(lambda: table.rowCount() == 2 and table.rowHeight(0) > 100, timeout=10_000)
    rows = table.rowHeight(0) + table.rowHeight(1)
    qtbot.waitUntil(lambda: table.viewport().height() >= rows, timeout=5_000)
    window.resize(1024, 700)  # the smallest window: the table still fits sideways and shows both rows
    qtbot.waitUntil(lambda: window.width() == 1024, timeout=5_000)
    assert table.horizontalHeader().length() <= table.viewport().width()
    qtbot.waitUntil(lambda: table.viewport().height() >= rows, timeout=5_000)
