"""The Models page's "Local folders" tab: model folders on this computer that work offline everywhere a Hub model
does, added and removed by the user, handed over to the other pages."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QListWidget, QPushButton, QVBoxLayout, QWidget

from guiapp.ui.text import error_text
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.wrapping_label import WrappingLabel

MISSING = "  (missing)"
LAST_FOLDER_KEY = "library/last_added_folder"
INTRO = ("Model folders on this computer (config.json and .safetensors) work offline everywhere a Hub model does. "
         "Choose a model's folder, or the folder that holds your model folders to add them all.")


class LocalFoldersTab(QWidget):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.folder_dialog: QFileDialog | None = None  # open while the user chooses a folder to add
        self.local_list = QListWidget(accessibleName="Local model folders")
        self.local_list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.local_status = WrappingLabel(INTRO)
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
        """Add `folder` to the list, or the model folders inside it; a folder that neither is nor holds a model is
        refused, saying why. Without `folder`, ask for one (starting where the user last chose one, else home)."""
        from guiapp.errors import MergesmithError
        from guiapp.jobs.library import add_models_in
        from guiapp.system.paths import home_dir
        from guiapp.system.units import plural

        settings = QSettings()
        if not folder:
            start = settings.value(LAST_FOLDER_KEY, "", type=str)
            dialog = QFileDialog(self, "Add a model folder, or the folder that holds your models",
                                 start if start and Path(start).is_dir() else str(home_dir()))
            dialog.setFileMode(QFileDialog.FileMode.Directory)
            dialog.setOption(QFileDialog.Option.ShowDirsOnly)
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            dialog.fileSelected.connect(self.add_local_folder)
            dialog.finished.connect(lambda _: setattr(self, "folder_dialog", None))
            self.folder_dialog = dialog
            dialog.open()
            return
        try:
            added = add_models_in(Path(folder))
        except MergesmithError as error:
            self.local_status.setText(error_text(error))
            set_status_style(self.local_status, "problem")
            return
        settings.setValue(LAST_FOLDER_KEY, str(Path(folder).parent if added == [Path(folder)] else folder))
        set_status_style(self.local_status, None)
        self.local_status.setText(f"Added {added[0]}." if len(added) == 1 else
                                  f"Added {plural(len(added), 'model folder')} from {folder}: "
                                  + ", ".join(path.name for path in added) + ".")
        self.refresh_local()

    def _selected(self) -> str | None:
        item = self.local_list.currentItem()
        return item.text().removesuffix(MISSING) if item else None

    def _remove_selected(self) -> None:
        from guiapp.jobs.library import remove_local_folder

        if folder := self._selected():
            remove_local_folder(Path(folder))
            self.local_status.setText(f"Removed {folder} from the list; its files are where they were.")
            set_status_style(self.local_status, None)
            self.refresh_local()

    def _hand_over(self, signal) -> None:
        if folder := self._selected():
            signal.emit(folder)
