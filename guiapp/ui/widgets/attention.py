"""Pointing the user at a control: scrolled into sight, focused, and outlined for a few seconds."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QScrollArea, QWidget

from guiapp.ui.theme import set_attention

ATTENTION_MS = 3000  # long enough to find the outline after the page scrolled


def draw_attention(widget: QWidget) -> None:
    """Scroll every scroll area holding `widget` so that it is in sight, give it the focus, and outline it until
    ATTENTION_MS have passed (the outline goes with the widget if it is deleted first)."""
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QScrollArea) and parent.widget() is not None and parent.widget().isAncestorOf(widget):
            parent.ensureWidgetVisible(widget)
        parent = parent.parentWidget()
    widget.setFocus()
    set_attention(widget, True)
    QTimer.singleShot(ATTENTION_MS, widget, lambda: set_attention(widget, False))
