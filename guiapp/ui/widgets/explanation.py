"""A failure shown in the user's terms: title, what happened, why, what to do, Details, and Retry.

It shows an `Explanation` (or the dict form the jobs history keeps); the raw error and traceback stay behind
the Details toggle. "Retry with suggested settings" appears only when the explanation carries settings.
"""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from guiapp.ui.text import html_escape
from guiapp.ui.theme import set_status_style


class ExplanationPanel(QFrame):
    retry_requested = Signal(dict)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._retry_with: dict[str, Any] = {}
        self.title = QLabel(wordWrap=True)
        font = self.title.font()
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.15)
        self.title.setFont(font)
        self.what, self.why, self.fix = (QLabel(wordWrap=True) for _ in range(3))
        for label in (self.what, self.why, self.fix):
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_button = QPushButton("Show details", checkable=True)
        self.details_button.setToolTip("The original error message and traceback, for reporting a problem.")
        self.details = QPlainTextEdit(readOnly=True)
        self.details.setVisible(False)
        self.details.setMinimumHeight(120)
        self.details_button.toggled.connect(self._toggle_details)
        self.retry_button = QPushButton("Retry with suggested settings")
        self.retry_button.clicked.connect(lambda: self.retry_requested.emit(dict(self._retry_with)))
        buttons = QHBoxLayout()
        buttons.addWidget(self.retry_button)
        buttons.addWidget(self.details_button)
        buttons.addStretch()
        layout = QVBoxLayout(self)
        for widget in (self.title, self.what, self.why, self.fix):
            layout.addWidget(widget)
        layout.addLayout(buttons)
        layout.addWidget(self.details)
        self.setVisible(False)

    def show_explanation(self, explanation: Any) -> None:
        """Show an Explanation or its dict; None hides the panel."""
        if explanation is None:
            self.setVisible(False)
            return
        data = asdict(explanation) if is_dataclass(explanation) else dict(explanation)
        self.title.setText(data.get("title", ""))
        set_status_style(self.title, "problem")
        self.what.setText(f"<b>What happened:</b> {html_escape(data.get('what', ''))}")
        self.why.setText(f"<b>Why:</b> {html_escape(data.get('why', ''))}")
        self.why.setVisible(bool(data.get("why")))
        self.fix.setText(f"<b>What to do:</b> {html_escape(data.get('fix', ''))}")
        self.fix.setVisible(bool(data.get("fix")))
        self._retry_with = dict(data.get("retry_with") or {})
        self.retry_button.setVisible(bool(self._retry_with))
        self.retry_button.setToolTip("Runs the job again with: "
                                     + ", ".join(f"{k} = {v}" for k, v in self._retry_with.items()))
        self.details.setPlainText(data.get("raw", ""))
        self.details_button.setVisible(bool(data.get("raw")))
        self.details_button.setChecked(False)
        self.setVisible(True)

    def _toggle_details(self, shown: bool) -> None:
        self.details.setVisible(shown)
        self.details_button.setText("Hide details" if shown else "Show details")
