"""Choosing a model: type a Hub id or a folder, pick from the live library (`guiapp.ui.library_model`), or browse
for a folder.

The list is the window's one `LibraryModel`, filtered to the kinds this picker takes (models, adapters): it
follows downloads, merges and deletions while the window is open. Long names are elided in the middle in the
list; the full reference is in the tooltip.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QPushButton, QWidget

from guiapp.ui.library_model import REFERENCE_ROLE, LibraryFilter, LibraryModel
from guiapp.ui.widgets.elided_line_edit import ElidedLineEdit


class ModelPicker(QWidget):
    changed = Signal(str)

    def __init__(self, placeholder: str = "org/name or a folder", parent: QWidget | None = None, *,
                 kinds: Iterable[str] = ("model",)) -> None:
        super().__init__(parent)
        self.kinds = tuple(kinds)
        self.combo = QComboBox(editable=True)
        self.combo.setLineEdit(ElidedLineEdit())  # a long path shows its start and its name, not just one end
        self.combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.combo.lineEdit().setPlaceholderText(placeholder)
        self.combo.setMinimumContentsLength(16)
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.view().setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.combo.editTextChanged.connect(self._text_changed)
        self.browse = QPushButton("Browse…")
        self.browse.setToolTip("Choose a model folder on this computer")
        self.browse.clicked.connect(self._browse)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.combo, 1)
        layout.addWidget(self.browse)
        self.setFocusProxy(self.combo)
        self._kept_text = ""

    def use_library(self, library: LibraryModel) -> None:
        """List `library`'s entries of this picker's kinds, following it as it changes."""
        rows = LibraryFilter(library, self.kinds, parent=self)
        self.combo.setModel(rows)
        self.combo.setCurrentIndex(-1)
        # A reset makes a combo box show its first row: keep what the user typed, and say nothing.
        rows.modelAboutToBeReset.connect(self._keep_text)
        rows.modelReset.connect(self._restore_text)

    def text(self) -> str:
        return self.combo.currentText().strip()

    def set_text(self, text: str, notify: bool = True) -> None:
        self.combo.blockSignals(not notify)
        self.combo.setEditText(text)
        self.combo.blockSignals(False)
        self._show_tooltip(text)

    def _keep_text(self) -> None:
        self._kept_text = self.combo.currentText()
        self.combo.blockSignals(True)

    def _restore_text(self) -> None:
        self.combo.setCurrentIndex(-1)
        self.combo.setEditText(self._kept_text)
        self.combo.blockSignals(False)

    def _text_changed(self, text: str) -> None:
        self._show_tooltip(text)
        self.changed.emit(text)

    def _show_tooltip(self, text: str) -> None:
        index = self.combo.findData(text.strip(), REFERENCE_ROLE)
        described = self.combo.itemData(index, Qt.ItemDataRole.ToolTipRole) if index >= 0 else None
        self.combo.lineEdit().setToolTip(described or text)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model folder", self.text())
        if folder:
            self.set_text(folder)
