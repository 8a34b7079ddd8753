"""A failure shown in the user's terms: title, what happened, why, what to do, the fixes as buttons, and Details.

It shows an `Explanation` (or the dict form the jobs history keeps) in the window's words (its `window` part,
`guiapp.facts.wording`: no command-line flag or environment variable) with the buttons
`guiapp.jobs.fixes.fix_actions` lists for it: Retry, Retry with the suggested settings, Choose another folder…,
Sign in…, Open the model's page, Use offline mode, and Replace <folder>, which asks first, naming what it deletes.
The raw error and traceback stay behind the Details toggle.
"""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.fixes import OPEN_MODEL_PAGE, REPLACE, RETRY, RETRY_WITH, FixAction, fix_actions
from guiapp.jobs.runner import JobStatus
from guiapp.ui.text import html_escape
from guiapp.ui.theme import set_heading, set_primary, set_status_style
from guiapp.ui.widgets.open_link import LinkFallback
from guiapp.ui.widgets.wrapping_label import WrappingLabel

# What happened to a job that stopped without an error, by its status.
STOPPED_WORDS = {JobStatus.INTERRUPTED: "Mergesmith was closed while it ran; nothing half-written was left behind."}


class ExplanationPanel(QFrame):
    """Emits `action_requested(FixAction)` for the fixes its owner performs (retrying, replacing once confirmed,
    choosing a folder, signing in, offline mode); opens the model's page itself."""

    action_requested = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.actions: list[FixAction] = []
        self.buttons: dict[str, QPushButton] = {}  # action name -> its button, as shown now
        self.confirm_replace: QMessageBox | None = None  # the open "Replace folder" question, if any
        self.title = WrappingLabel()
        set_heading(self.title, 1.15)
        self.what, self.why, self.fix = (WrappingLabel() for _ in range(3))
        for label in (self.what, self.why, self.fix):
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_button = QPushButton("Show details", checkable=True)
        self.details_button.setToolTip("The original error message and traceback, for reporting a problem.")
        self.details = QPlainTextEdit(readOnly=True)
        self.details.setVisible(False)
        self.details.setMinimumHeight(120)
        self.details_button.toggled.connect(self._toggle_details)
        self.action_row = QHBoxLayout()
        self.link_fallback = LinkFallback()
        row = QHBoxLayout()
        row.addLayout(self.action_row)
        row.addStretch()
        row.addWidget(self.details_button)
        layout = QVBoxLayout(self)
        for widget in (self.title, self.what, self.why, self.fix):
            layout.addWidget(widget)
        layout.addLayout(row)
        layout.addWidget(self.link_fallback)
        layout.addWidget(self.details)
        self.setVisible(False)

    @property
    def retry_button(self) -> QPushButton | None:
        """The button that retries with the suggested settings, when the explanation suggests any."""
        return self.buttons.get(RETRY_WITH)

    def show_explanation(self, explanation: Any, status: str = JobStatus.FAILED, output: str | None = None) -> None:
        """Show an Explanation or its dict with the fixes for a job that ended with `status` and writes `output`;
        None shows only the plain Retry for a cancelled job (nothing at all for other statuses)."""
        data = (asdict(explanation) if is_dataclass(explanation) else dict(explanation)) if explanation else {}
        self.actions = fix_actions(data, status, output)
        self._show_buttons()
        self.link_fallback.hide_address()
        if not data and not self.actions:
            self.setVisible(False)
            return
        self.title.setText(data.get("title", "") if data else "The job was stopped")
        set_status_style(self.title, "problem" if data else "warning")
        # The window's words where they differ from the command line's (an explanation saved by an earlier
        # version has none).
        window = data.get("window") or {}
        self._show_part(self.what, "What happened", window.get("what", data.get("what", "")) if data else
                        STOPPED_WORDS.get(status, "It was cancelled before it finished; nothing half-written was left "
                                          "behind."))
        self._show_part(self.why, "Why", window.get("why", data.get("why", "")))
        self._show_part(self.fix, "What to do", window.get("fix", data.get("fix", "")))
        self.details.setPlainText(data.get("raw", ""))
        self.details_button.setVisible(bool(data.get("raw")))
        self.details_button.setChecked(False)
        self.setVisible(True)

    def _show_part(self, label: QLabel, heading: str, text: str) -> None:
        label.setText(f"<b>{heading}:</b> {html_escape(text)}")
        label.setVisible(bool(text))

    def _show_buttons(self) -> None:
        for button in self.buttons.values():
            self.action_row.removeWidget(button)
            button.deleteLater()
        self.buttons = {}
        for action in self.actions:
            button = QPushButton(action.label)
            tooltip = action.tooltip
            if action.action == RETRY_WITH:
                tooltip += " (" + ", ".join(f"{key} = {value}" for key, value in action.changes.items()) + ")"
            button.setToolTip(tooltip)
            button.clicked.connect(lambda _=False, chosen=action: self._perform(chosen))
            self.action_row.addWidget(button)
            self.buttons[action.action] = button
        first = next((b for name, b in self.buttons.items() if name not in (REPLACE, RETRY)), None)
        if first is not None:
            set_primary(first)  # the suggested fix stands out; replacing never does

    def _perform(self, action: FixAction) -> None:
        if action.action == OPEN_MODEL_PAGE:
            self.link_fallback.open(QUrl(action.url), "the model's page")
        elif action.action == REPLACE:
            self._ask_to_replace(action)
        else:
            self.action_requested.emit(action)

    def _ask_to_replace(self, action: FixAction) -> None:
        """Ask before replacing: the question names what is deleted; "Keep it" is the default."""
        box = QMessageBox(QMessageBox.Icon.Warning, "Replace the existing folder?",
                          action.tooltip.replace(" You are asked to confirm first.", ""), parent=self)
        replace = box.addButton("Replace folder", QMessageBox.ButtonRole.DestructiveRole)
        keep = box.addButton("Keep it", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(keep)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.buttonClicked.connect(lambda clicked: clicked is replace and self.action_requested.emit(action))
        box.finished.connect(lambda _: setattr(self, "confirm_replace", None))
        self.confirm_replace = box
        box.open()

    def _toggle_details(self, shown: bool) -> None:
        self.details.setVisible(shown)
        self.details_button.setText("Hide details" if shown else "Show details")
