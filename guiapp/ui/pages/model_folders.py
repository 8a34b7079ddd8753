"""The Models page's "Local folders" tab: model folders on this computer that work offline everywhere a Hub model
does, added and removed by the user, handed over to the other pages."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QListWidget, QPushButton, QVBoxLayout, QWidget

from guiapp.ui.text import error_text
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.wrapping_label import WrappingLabel

MISSING = "  (missing)"


class LocalFoldersTab(QWidget):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.local_list = QListWidget(accessibleName="Local model folders")
        self.local_list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.local_status = WrappingLabel("Model folders on this computer (config.json and .safetensors) work offline "
                                   "everywhere a Hub model does.")
        buttons = QHBoxLayout()
        add = QPushButton("Add folder…")
        add.clicked.connect(lambda: self.add_local_folder())
        remove = QPushButton("Remove from list")
        remove.setToolTip("Forget the folder; its files stay where they are")
        remove.clicked.connect(self._remove_selected)
        local_base = QPushButton("Use as base")
        local_base.clicked.connect(lambda: self._hand_over(state.use_as_base))
        self.local_add_button = QPushButton("Add to merge")
        self.local_add_button.clicked.connect(lambda: self._hand_over(state.add_to_merge))
        local_extract = QPushButton("Extract LoRA from this")
        local_extract.clicked.connect(lambda: (folder := self._selected()) and state.extract_from.emit(folder, ""))
        for button in (add, remove, local_base, self.local_add_button, local_extract):
            buttons.addWidget(button)
        buttons.addStretch()
        layout = QVBoxLayout(self)
        layout.addWidget(self.local_list, 1)
        layout.addWidget(self.local_status)
        layout.addLayout(buttons)

    def refresh_local(self) -> None:
        from guiapp.jobs.library import list_local_folders

        self.local_list.clear()
        for folder in list_local_folders():
            self.local_list.addItem(str(folder) + ("" if folder.is_dir() else MISSING))
            self.local_list.item(self.local_list.count() - 1).setToolTip(str(folder))
        self.state.library.refresh()  # the pickers list the added folders

    def add_local_folder(self, folder: str | None = None) -> None:
        """Add `folder` (asked for when None) to the list; a folder that holds no model is refused, saying why."""
        from guiapp.errors import MergesmithError
        from guiapp.jobs.library import add_local_folder

        folder = folder or QFileDialog.getExistingDirectory(self, "Add a model folder")
        if not folder:
            return
        try:
            add_local_folder(Path(folder))
        except MergesmithError as error:
            self.local_status.setText(error_text(error))
            set_status_style(self.local_status, "problem")
            return
        set_status_style(self.local_status, None)
        self.local_status.setText(f"Added {folder}.")
        self.refresh_local()

    def _selected(self) -> str | None:
        item = self.local_list.currentItem()
        return item.text().removesuffix(MISSING) if item else None

    def _remove_selected(self) -> None:
        from guiapp.jobs.library import remove_local_folder

        if folder := self._selected():
            remove_local_folder(Path(folder))
            self.refresh_local()

    def _hand_over(self, signal) -> None:
        if folder := self._selected():
            signal.emit(folder)
