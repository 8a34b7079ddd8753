"""The window is usable at 1024 × 700: every page fits, the Merge form needs no sideways scrolling, and long
model names are elided in the middle with the full name in the tooltip."""

from __future__ import annotations

from PySide6.QtWidgets import QScrollArea


def test_every_page_fits_1024_by_700_and_names_elide_in_the_middle(qtbot, window, models):
    window.resize(1024, 700)
    hint = window.minimumSizeHint()
    assert hint.width() <= 1024 and hint.height() <= 700
    qtbot.waitUntil(lambda: window.width() == 1024, timeout=5_000)
    window.show_page("merge")
    page = window.merge
    page.method_box.select("ties")
    long_name = models.tune_a.parent / ("a-fine-tune-with-a-name-much-longer-than-its-field-" * 2 + "end")
    page.base_picker.set_text(str(long_name))
    page.add_model(str(long_name))
    scroll = page.findChildren(QScrollArea)[0]
    qtbot.waitUntil(lambda: scroll.widget().minimumSizeHint().width() <= scroll.viewport().width(), timeout=5_000)
    field = page.base_picker.combo.lineEdit()
    shown = field.shown_text()
    assert "…" in shown and shown.startswith(str(long_name)[:4]) and shown.endswith("end")
    assert field.toolTip() == str(long_name)
    cell = page.table.cellWidget(0, 0)
    assert cell.shown_text().endswith("end") and cell.toolTip() == str(long_name)
