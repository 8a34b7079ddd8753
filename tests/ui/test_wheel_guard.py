"""The mouse wheel scrolls the page and never changes a setting it passes over.

Real wheel events (QTest.wheelEvent: a system wheel event at the widget's centre on the window, so Qt picks the
widget under the pointer, gives wheel focus and propagates to the parents as it does for a mouse), on the real
window's Merge page inside its scroll area.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QComboBox, QScrollArea, QSlider, QWidget

ONE_NOTCH_DOWN = -120


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`): these tests only scroll and choose on the Merge page."""
    return shared_window


def wheel(widget: QWidget, notches: int = 1) -> None:
    """Turn the wheel `notches` notches towards the user over the centre of `widget`."""
    window = widget.window()
    for _ in range(notches):
        QTest.wheelEvent(window.windowHandle(), widget.mapTo(window, widget.rect().center()),
                         QPoint(0, ONE_NOTCH_DOWN))
        QApplication.processEvents()


def scroll_area_of(widget: QWidget) -> QScrollArea:
    parent = widget.parentWidget()
    while not isinstance(parent, QScrollArea):
        parent = parent.parentWidget()
    return parent


def merge_page_scrolled_to_top(window):
    window.resize(1000, 560)  # shorter than the form: the page can scroll
    window.show_page("merge")
    page = window.merge
    page.method_combo.setCurrentIndex(page.method_combo.findData("ties"))
    window.nav.setFocus()
    scroll = scroll_area_of(page.method_combo)
    scroll.verticalScrollBar().setValue(0)
    QApplication.processEvents()
    assert scroll.verticalScrollBar().maximum() > 0
    return page, scroll


def a_visible_slider(page, scroll: QScrollArea) -> QSlider:
    sliders = [s for s in page.param_form.findChildren(QSlider) if s.isVisible()]
    assert sliders, "the TIES form has a number parameter with a slider"
    slider = sliders[0]
    QApplication.processEvents()  # the form's layout settles
    top = slider.mapTo(scroll.widget(), QPoint(0, 0)).y()
    scroll.verticalScrollBar().setValue(top - scroll.viewport().height() // 2)  # mid-page, room either way
    QApplication.processEvents()
    centre = slider.mapTo(scroll.viewport(), slider.rect().center())
    assert scroll.viewport().rect().contains(centre)
    return slider


def test_value_widgets_take_focus_only_by_click_or_tab(window):
    page, _ = merge_page_scrolled_to_top(window)
    for kind in (QComboBox, QSlider):
        widgets = page.findChildren(kind)
        assert widgets and all(w.focusPolicy() == Qt.FocusPolicy.StrongFocus for w in widgets)


def test_the_wheel_over_an_unfocused_method_combo_scrolls_the_page(qtbot, window):
    page, scroll = merge_page_scrolled_to_top(window)
    assert not page.method_combo.hasFocus()
    wheel(page.method_combo, notches=2)
    assert page.method_combo.currentData() == "ties"
    assert scroll.verticalScrollBar().value() > 0


def test_the_wheel_over_an_unfocused_slider_scrolls_the_page(qtbot, window):
    page, scroll = merge_page_scrolled_to_top(window)
    slider = a_visible_slider(page, scroll)
    before, position = slider.value(), scroll.verticalScrollBar().value()
    values = page.param_form.values()
    assert not slider.hasFocus() and position < scroll.verticalScrollBar().maximum()
    wheel(slider, notches=2)
    assert slider.value() == before and page.param_form.values() == values
    assert scroll.verticalScrollBar().value() > position


def test_a_clicked_combo_takes_the_wheel(qtbot, window):
    page, scroll = merge_page_scrolled_to_top(window)
    qtbot.mouseClick(page.method_combo, Qt.MouseButton.LeftButton)  # opens the list and gives focus
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Escape)  # closes the list, focus stays
    window.activateWindow()  # the offscreen platform leaves no window active once the list's popup closed
    qtbot.waitUntil(lambda: window.isActiveWindow() and page.method_combo.hasFocus())
    chosen = page.method_combo.currentIndex()
    wheel(page.method_combo)
    assert page.method_combo.currentIndex() == chosen + 1
    assert scroll.verticalScrollBar().value() == 0


def test_a_clicked_slider_takes_the_wheel(qtbot, window):
    page, scroll = merge_page_scrolled_to_top(window)
    slider = a_visible_slider(page, scroll)
    qtbot.mouseClick(slider, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.isActiveWindow() and slider.hasFocus())
    before, position = slider.value(), scroll.verticalScrollBar().value()
    wheel(slider)
    assert slider.value() != before
    assert scroll.verticalScrollBar().value() == position

