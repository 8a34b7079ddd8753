"""Choosing a model: type a Hub id or a folder, pick from the library (local folders, downloaded models), or
browse for a folder."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QPushButton, QWidget


def library_entries() -> list[str]:
    """Model references the library knows: added local folders, then models in the Hugging Face cache.

    Runs on a worker thread (scanning the cache reads the disk).
    """
    from guiapp.jobs.library import list_local_folders, scan_cache  # noqa: PLC0415

    entries = [str(folder) for folder in list_local_folders()]
    try:
        entries += [model.repo_id for model in scan_cache()]
    except Exception:  # an unreadable cache leaves the local folders, which still work
        pass
    return entries


class ModelPicker(QWidget):
    changed = Signal(str)

    def __init__(self, placeholder: str = "org/name or a folder", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = QComboBox(editable=True)
        self.combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.combo.lineEdit().setPlaceholderText(placeholder)
        self.combo.setMinimumContentsLength(24)
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.editTextChanged.connect(self.changed)
        self.browse = QPushButton("Browse…")
        self.browse.setToolTip("Choose a model folder on this computer")
        self.browse.clicked.connect(self._browse)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.combo, 1)
        layout.addWidget(self.browse)
        self.setFocusProxy(self.combo)

    def set_library(self, entries: list[str]) -> None:
        text = self.text()
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.addItems(entries)
        self.combo.setEditText(text)
        self.combo.blockSignals(False)

    def text(self) -> str:
        return self.combo.currentText().strip()

    def set_text(self, text: str, notify: bool = True) -> None:
        self.combo.blockSignals(not notify)
        self.combo.setEditText(text)
        self.combo.blockSignals(False)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model folder", self.text())
        if folder:
            self.set_text(folder)
