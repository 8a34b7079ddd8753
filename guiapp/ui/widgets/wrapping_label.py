"""A word-wrapped label that never widens the window: long unbroken text (paths, tensor names, a sample model's
generated tokens) wraps inside it.

Qt wraps a label only at spaces, so one 2000-character word makes the label, its page and the window that wide.
`WrappingLabel` shows such runs with zero-width spaces at their natural break points (after `/`, `_`, `.`, …, and
at least every `RUN` characters); `text()` still returns what was set, and `strip_break_marks` removes the marks
from anything copied out of the window.
"""

from __future__ import annotations

import re

from PySide6.QtGui import QGuiApplication, Qt  # QtGui's Qt has mightBeRichText
from PySide6.QtWidgets import QLabel, QWidget

BREAK = "\u200b"
RUN = 24  # characters without a break point before one is made: narrower than any pane the window lays out
_SOFT_BREAK_AFTER = "/\\_-.,:;=&?"
# In rich text, tags and entities are left whole: a mark inside `<a href=…>` or `&amp;` would break them.
_MARKUP = re.compile(r"(<[^>]*>|&#?\w+;)")
_UNBROKEN = re.compile(rf"\S{{{RUN + 1},}}")


def breakable(text: str, rich: bool = False) -> str:
    """`text` with a zero-width space wherever a run of more than `RUN` non-space characters may wrap."""
    if rich:
        return "".join(part if _MARKUP.fullmatch(part) else breakable(part) for part in _MARKUP.split(text))
    return _UNBROKEN.sub(lambda run: _break_run(run.group()), text)


def _break_run(run: str) -> str:
    pieces, since_break = [], 0
    for char in run:
        pieces.append(char)
        since_break += 1
        if char in _SOFT_BREAK_AFTER or since_break >= RUN:
            pieces.append(BREAK)
            since_break = 0
    return "".join(pieces).rstrip(BREAK)


def strip_break_marks(text: str) -> str:
    return text.replace(BREAK, "")


class WrappingLabel(QLabel):
    """A QLabel with word wrap on whose text wraps inside it however long its words are."""

    def __init__(self, text: str = "", parent: QWidget | None = None, **properties) -> None:
        super().__init__(parent, **properties)
        self.setWordWrap(True)
        self._text = ""
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self._text = text
        rich = self.textFormat() == Qt.TextFormat.RichText or (
            self.textFormat() == Qt.TextFormat.AutoText and Qt.mightBeRichText(text))
        super().setText(breakable(text, rich))

    def text(self) -> str:
        return self._text

    def clear(self) -> None:
        self.setText("")


def keep_clipboard_clean(app: QGuiApplication) -> None:
    """Text copied from a WrappingLabel reaches the clipboard without the break marks (a path pasted into a
    terminal must be the path)."""
    clipboard = app.clipboard()

    def clean(mode) -> None:
        text = clipboard.text(mode)
        if BREAK in text:
            clipboard.setText(strip_break_marks(text), mode)

    clipboard.dataChanged.connect(lambda: clean(clipboard.Mode.Clipboard))
    clipboard.selectionChanged.connect(lambda: clean(clipboard.Mode.Selection))
