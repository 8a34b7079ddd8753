"""The mouse wheel scrolls the page; it changes a dropdown, slider or number box only once the user chose it.

Qt's value widgets take the wheel (and, with their default WheelFocus, even the focus) whenever the pointer is
over them, so scrolling a long form switched the merge method or nudged a parameter. One application-wide event
filter fixes that everywhere: value widgets get StrongFocus (focus by click or Tab, never by the wheel), and a
wheel event on one that does not have the focus is ignored, so Qt passes it on to the parents: the scroll area.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox, QSlider, QWidget

# Not QAbstractSlider: scroll bars are what the wheel is meant to move.
VALUE_WIDGETS = (QComboBox, QSlider, QAbstractSpinBox)


class WheelGuard(QObject):
    """The event filter; `install_wheel_guard` puts one on the application."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        # Every event of every object passes here: the cheap type test comes first, so that the others (nearly
        # all) are let through without asking for the event's type (a Python enum made per call).
        if not isinstance(watched, VALUE_WIDGETS):
            return False
        kind = event.type()
        if kind == QEvent.Type.Polish:
            guard_focus_policy(watched)
        elif kind == QEvent.Type.Wheel and not watched.hasFocus():
            # Handled for this widget but not accepted: Qt offers the event to the parent widgets next.
            event.ignore()
            return True
        return False


def guard_focus_policy(widget: QWidget) -> None:
    """Focus by click or Tab only: a widget whose policy includes the wheel gets StrongFocus instead."""
    if widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)


def install_wheel_guard(app: QApplication) -> None:
    """Filter `app`'s events through one WheelGuard (again: nothing more) and fix the widgets that already exist."""
    if app.findChild(WheelGuard) is not None:
        return
    app.installEventFilter(WheelGuard(app))
    for widget in app.allWidgets():
        if isinstance(widget, VALUE_WIDGETS):
            guard_focus_policy(widget)
