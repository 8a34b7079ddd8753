"""A job page's action bar: the primary button, a one-line summary of the job, and why it cannot run yet.

The bar sits below the page's scroll area, so the main action never scrolls away. While the form has an error or
is still being checked the button is disabled and the reason stands next to it ("Fix: …", "Checking…"). Both
lines keep one line's height and elide what does not fit (the full text in the tooltip), so nothing shifts when a
status appears. A problem the page can point at gets "Show me" (the page focuses the control that fixes it), and
one with a clear fix a button that makes it; the page connects their `clicked`.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from guiapp.facts.wording import for_window
from guiapp.ui.theme import set_primary, set_status_style

MIN_FIX_WIDTH = 200  # pixels of the fix button's text however narrow the bar


class ElidedLabel(QLabel):
    """A one-line label that shows what fits of its text (elided in the middle unless told otherwise, full text in
    the tooltip).

    `text()` returns the whole text; the label draws the elided one. Its height is one line, whatever it holds.
    """

    def __init__(self, parent: QWidget | None = None, elide: Qt.TextElideMode = Qt.TextElideMode.ElideMiddle) -> None:
        super().__init__(parent)
        self._full = ""
        self._elide_mode = elide
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(self.fontMetrics().height() + 4)
        self.setTextFormat(Qt.TextFormat.PlainText)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self._full = text.replace("\n", " ")
        self._elide()

    def text(self) -> str:
        return self._full

    def clear(self) -> None:
        self.setText("")

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, self._elide_mode, max(self.width(), 1))
        super().setText(shown)
        self.setToolTip(self._full if shown != self._full else "")


class ActionBar(QFrame):
    """The primary `button` (named `action`), the job's `summary` line and the `status` line beside the button,
    and for a problem `show_button` ("Show me") and `fix_button` (the fix in words), hidden until offered."""

    def __init__(self, action: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.button = QPushButton(action)
        self.button.setDefault(True)
        set_primary(self.button)
        self.summary = ElidedLabel()
        self.summary.setAccessibleName("Job summary")
        self.status = ElidedLabel(elide=Qt.TextElideMode.ElideRight)  # a problem's first words say what it is
        self.status.setAccessibleName("Why the job cannot run yet")
        lines = QVBoxLayout()
        lines.setSpacing(2)
        lines.addWidget(self.summary)
        lines.addWidget(self.status)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addWidget(self.button)
        layout.addLayout(lines, 1)
        self.show_button = QPushButton("Show me")
        self.show_button.setToolTip("Go to the setting that fixes this problem")
        self.fix_button = QPushButton()
        for helper in (self.show_button, self.fix_button):
            helper.setVisible(False)
            layout.addWidget(helper)
        self.set_waiting("")

    def set_summary(self, text: str) -> None:
        self.summary.setText(text)

    def set_waiting(self, reason: str) -> None:
        """Nothing to run yet (the form is incomplete): the button is disabled and `reason` says what is missing."""
        self._show(False, reason, "muted")

    def set_checking(self) -> None:
        self._show(False, "Checking…", "muted")

    def set_blocked(self, problem: str, can_show: bool = False, fix: str | None = None) -> None:
        """The job cannot run as set up: the button is disabled and "Fix: <problem>" says why; `can_show` offers
        "Show me", `fix` (the fix in words) a button that makes it."""
        self._show(False, f"Fix: {for_window(problem)}", "problem")
        self.show_button.setVisible(can_show)
        # At most a third of the bar, so the problem itself stays readable beside it (the tooltip has it all).
        shown = self.fix_button.fontMetrics().elidedText(fix or "", Qt.TextElideMode.ElideRight,
                                                         max(self.width() // 3, MIN_FIX_WIDTH))
        self.fix_button.setText(shown)
        self.fix_button.setToolTip(fix or "")
        self.fix_button.setVisible(bool(fix))

    def set_ready(self, note: str = "Ready.", kind: str = "good") -> None:
        self._show(True, note, kind)

    def _show(self, enabled: bool, text: str, kind: str) -> None:
        self.show_button.setVisible(False)
        self.fix_button.setVisible(False)
        self.button.setEnabled(enabled)
        self.status.setText(text)
        set_status_style(self.status, kind if text else None)
