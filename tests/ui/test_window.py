"""The window as a whole: first-run welcome with the sample models, keyboard navigation, window state,
the Hardware page's matrix, and the colour scheme."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QPalette
from PySide6.QtWidgets import QApplication, QPushButton

from guiapp.ui.app import create_window
from guiapp.ui.theme import status_style_sheet
from tests.ui.conftest import broken_float16, wait_for_job


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`) for the tests that need no fresh one; those that do (a first run,
    a restart, another probe, the window as built) call `make_window`."""
    return shared_window


def test_first_run_welcome_tries_the_sample_models(qtbot, make_window, tmp_path):
    window = make_window()
    assert window.current_page() == "welcome"
    window.welcome.try_samples(tmp_path / "samples")
    qtbot.waitUntil(lambda: window.current_page() == "merge", timeout=60_000)
    page = window.merge
    assert page.method_combo.currentData() == "ties" and page.table.rowCount() == 2
    assert page.output_edit.text() == str(tmp_path / "samples" / "merged")
    qtbot.waitUntil(lambda: page.run_message.text() == "Ready.", timeout=20_000)
    window.activateWindow()  # shortcuts reach an active window only
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)
    qtbot.keySequence(window, QKeySequence("Ctrl+R"))  # runs the job of the page shown
    assert window.current_page() == "jobs"
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"


def test_keyboard_reaches_every_page_and_the_state_is_restored(qtbot, make_window):
    window = make_window()
    pages = ("welcome", "models", "merge", "lora", "experts", "try", "lab", "jobs", "hardware", "settings")
    for number, page in enumerate(pages, start=1):
        qtbot.keySequence(window, QKeySequence(f"Ctrl+{number % 10}"))
        assert window.current_page() == page
    qtbot.keySequence(window, QKeySequence("Ctrl+3"))
    window.resize(760, 560)  # inside the offscreen screen (800 × 600), which restoring clamps to
    window.close()
    _, again = create_window([])
    qtbot.addWidget(again)
    assert again.current_page() == "merge"  # not the welcome any more: the page last open
    assert again.height() == 560  # (the width is held at the window's minimum, 798 here)
    again.state.jobs.shutdown()


def test_tab_order_follows_the_merge_form(qtbot, window):
    window.show_page("merge")
    page = window.merge
    page.method_combo.setFocus()
    order = []
    for _ in range(4):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        order.append(QApplication.focusWidget())
    assert page.base_picker.combo in order or page.base_picker.combo.lineEdit() in order


def test_hardware_page_shows_the_matrix_with_reasons(qtbot, make_window, probed):
    window = make_window(broken_float16(probed))
    page = window.hardware
    window.show_page("hardware")
    assert page.device_combo.currentData() == "cpu"
    dtypes = [page.jobs_table.horizontalHeaderItem(c).text() for c in range(page.jobs_table.columnCount())]
    merge_float16 = page.jobs_table.item(0, dtypes.index("float16"))
    assert merge_float16.text() == "✗ no" and "Half" in merge_float16.toolTip()
    assert page.jobs_table.item(0, dtypes.index("bfloat16")).text() == "✓ yes"
    operations = [page.matrix.verticalHeaderItem(r).text() for r in range(page.matrix.rowCount())]
    assert "svd" in operations and "matmul" in operations
    qtbot.waitUntil(lambda: "RAM:" in page.memory.text(), timeout=10_000)
    assert "Disk:" in page.memory.text()


def test_dark_scheme_is_legible(qtbot, window):
    window.show_page("settings")
    combo = window.settings.theme_combo
    combo.setCurrentIndex(combo.findData("dark"))
    palette = QApplication.palette()
    window_colour, text = palette.color(QPalette.ColorRole.Window), palette.color(QPalette.ColorRole.WindowText)
    assert window_colour.lightness() < 80 and text.lightness() > 180
    combo.setCurrentIndex(combo.findData("system"))
    assert QApplication.palette().color(QPalette.ColorRole.Window).lightness() > 128


def test_the_built_window_is_dressed_by_the_application_style_sheet(qtbot, make_window):
    window = make_window()
    # The window is built with the sheet held back (faster) and the sheet applied once it is complete.
    assert QApplication.instance().styleSheet() == status_style_sheet()
    primary = [button for button in window.findChildren(QPushButton) if button.property("role") == "primary"]
    assert primary and all(button.font().bold() for button in primary)  # the sheet's rule for primary buttons


def test_switching_the_scheme_never_replaces_the_style_under_a_style_sheet(qtbot, window, monkeypatch):
    # Qt can crash when the application's style is replaced while a style sheet is applied: the next
    # setStyleSheet repolishes widgets through the deleted style (a full test run segfaulted there, building a window).
    sheets_when_replaced = []
    replace_style = QApplication.setStyle
    monkeypatch.setattr(QApplication, "setStyle", staticmethod(
        lambda style: sheets_when_replaced.append(QApplication.instance().styleSheet()) or replace_style(style)))
    combo = window.settings.theme_combo
    for scheme in ("dark", "light", "system"):
        combo.setCurrentIndex(combo.findData(scheme))
        assert QApplication.instance().styleSheet()
    assert not any(sheets_when_replaced)


def test_hardware_page_leads_with_the_answer_and_keeps_the_matrix_for_engineers(qtbot, window):
    page = window.hardware
    window.show_page("hardware")
    verdict = page.verdict.text()
    assert verdict.startswith("On this CPU: store in bfloat16"), verdict
    assert "half the size of float32" in verdict and "float32 either way" in verdict
    assert page.details_button.text() == "Details for engineers" and not page.details_button.isChecked()
    assert not page.matrix.isVisible()  # collapsed until asked for
    qtbot.mouseClick(page.details_button, Qt.MouseButton.LeftButton)
    assert page.matrix.isVisible()
    operations = [page.matrix.verticalHeaderItem(r).text() for r in range(page.matrix.rowCount())]
    dtypes = [page.matrix.horizontalHeaderItem(c).text() for c in range(page.matrix.columnCount())]
    svd_bfloat16 = page.matrix.item(operations.index("svd"), dtypes.index("bfloat16"))
    assert svd_bfloat16.text() == "✗" and "SVD in bfloat16" in svd_bfloat16.toolTip()
    tips = [page.matrix.item(r, c).toolTip() for r in range(page.matrix.rowCount())
            for c in range(page.matrix.columnCount())]
    raw = [tip for tip in tips if "Error" in tip or "not implemented for '" in tip]
    assert not raw, raw[:3]  # plain words, not exception text
