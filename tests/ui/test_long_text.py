"""No text makes the window wider: a long unbroken line (a path, a tensor name, a sample model's generated tokens)
wraps inside its label, on every page, and copying it gives back the text without break marks."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication, QLabel, QScrollArea

from guiapp.ui.widgets.wrapping_label import BREAK, WrappingLabel

UNBROKEN = "generated" * 300  # 2700 characters without a space: wider than any screen


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`): the long line is put back into each label."""
    return shared_window


def _describe(label: QLabel) -> str:
    chain, widget = [], label
    while widget is not None and len(chain) < 4:
        chain.append(widget.objectName() or type(widget).__name__)
        widget = widget.parentWidget()
    return " < ".join(chain) + f" ({label.text()[:40]!r})"


def _settle() -> None:
    """Let a size change travel up to the window: each parent's layout runs in a later turn of the event loop."""
    for _ in range(12):
        QApplication.processEvents()


def _scrolls_sideways(label: QLabel) -> bool:
    """Whether the scroll area around `label` (if any) now needs a horizontal scroll bar."""
    parent = label.parentWidget()
    while parent is not None and not isinstance(parent, QScrollArea):
        parent = parent.parentWidget()
    return parent is not None and parent.widget().minimumSizeHint().width() > parent.viewport().width()


def test_no_wrapped_label_widens_the_window_with_a_long_unbroken_line(qtbot, window):
    window.resize(1280, 860)
    widening, checked = [], 0
    for key, page in window.pages.items():
        window.show_page(key)
        _settle()
        narrowest = window.minimumSizeHint().width()
        for label in page.findChildren(QLabel):
            if not label.wordWrap():
                continue
            before, hidden = label.text(), label.isHidden()
            label.show()  # a message shown only when there is one: it is shown with its text
            label.setText(UNBROKEN)
            _settle()
            checked += label.isVisible()
            if window.minimumSizeHint().width() > narrowest or _scrolls_sideways(label):
                widening.append(f"{key}: {_describe(label)}")
            label.setText(before)
            label.setHidden(hidden)
            _settle()
    assert checked > 30  # the wrapped labels of every page
    assert not widening, "these labels widen the window (or scroll their page sideways) with a long line:\n" + "\n".join(widening)
    assert window.width() == 1280


def test_a_wrapping_label_keeps_its_text_and_the_clipboard_gets_it_whole(qtbot, window):
    path = "/home/someone/models/" + "a-very-long-folder-name_" * 6 + "merged-2"
    label = WrappingLabel(path)
    qtbot.addWidget(label)
    assert label.text() == path
    assert label.minimumSizeHint().width() < 300
    rich = WrappingLabel(f'<a href="file://{path}">{path}</a> &amp; more')
    shown = QLabel.text(rich)
    assert f'<a href="file://{path}">' in shown and BREAK in shown  # the link's address is left whole
    assert rich.text().endswith("</a> &amp; more")
    clipboard = QApplication.clipboard()
    clipboard.setText(f"x{BREAK}y")  # as Qt copies a selection out of a label
    qtbot.waitUntil(lambda: clipboard.text() == "xy", timeout=2_000)
