"""The Merge page's Advanced section: tokenizer source and slices (YAML), folded away until asked for."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.recipe_document import parse_slices


class AdvancedBox(QWidget):
    changed = Signal()  # the tokenizer source was edited
    slices_changed = Signal(bool)  # the slices text was edited; True while it holds slices

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.advanced_button = QToolButton(text="Advanced: tokenizer, slices, gradients", checkable=True)
        self.advanced_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.advanced_button.setArrowType(Qt.ArrowType.RightArrow)
        self.advanced_button.toggled.connect(self._toggle)
        layout.addWidget(self.advanced_button)
        self.advanced = QGroupBox()
        form = QFormLayout(self.advanced)
        self.tokenizer_combo = QComboBox(editable=True, accessibleName="Tokenizer source")
        self.tokenizer_combo.addItems(["", "base"])
        self.tokenizer_combo.lineEdit().setPlaceholderText("the base model's (default)")
        self.tokenizer_combo.editTextChanged.connect(lambda _: self.changed.emit())
        form.addRow("Tokenizer source", self.tokenizer_combo)
        self.slices_edit = QPlainTextEdit(placeholderText="- sources:\n  - model: org/a\n    layer_range: [0, 16]\n"
                                          "  - model: org/b\n    layer_range: [0, 16]")
        self.slices_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.slices_edit.setMaximumHeight(140)
        self.slices_edit.setTabChangesFocus(True)
        self.slices_edit.textChanged.connect(lambda: self.slices_changed.emit(bool(self.slices_edit.toPlainText().strip())))
        form.addRow("Slices (YAML)", self.slices_edit)
        self.slices_message = QLabel(wordWrap=True, visible=False)
        form.addRow("", self.slices_message)
        form.addRow(QLabel("Gradients and filters: press “list” next to any number to give a list "
                           "across layers or {filter, value} entries.", wordWrap=True))
        self.advanced.setVisible(False)
        layout.addWidget(self.advanced)

    def slices(self) -> Any:
        """The slices as the recipe takes them (see `parse_slices`)."""
        return parse_slices(self.slices_edit.toPlainText())

    def show_values(self, slices: Any, tokenizer_source: str) -> None:
        """Show a recipe's slices (opening the section when there are some) and tokenizer source."""
        import yaml  # noqa: PLC0415

        self.slices_edit.setPlainText(yaml.safe_dump(slices, sort_keys=False).strip() if slices else "")
        if slices:
            self.advanced_button.setChecked(True)
        self.tokenizer_combo.setEditText(tokenizer_source)

    def _toggle(self, shown: bool) -> None:
        self.advanced.setVisible(shown)
        self.advanced_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
