"""A status label that is shown only while it has something to say."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

from guiapp.ui.theme import set_status_style


def show_message(label: QLabel, text: str | None, kind: str = "problem") -> None:
    """Show `text` in `label` styled as `kind` ("problem", "warning", "good", "muted"); hide it when empty."""
    label.setText(text or "")
    label.setVisible(bool(text))
    set_status_style(label, kind if text else None)
