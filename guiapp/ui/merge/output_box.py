"""The Merge page's Output box: device and output dtype (from the probe), output folder and the replace choice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
)

from guiapp.facts.dtypes import WRITABLE
from guiapp.system.paths import home_dir
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.options import OptionCombo, device_choices, dtype_choices
from guiapp.ui.widgets.wrapping_label import WrappingLabel


class OutputBox(QGroupBox):
    device_changed = Signal()
    dtype_changed = Signal()
    folder_changed = Signal()  # the folder or the replace choice

    def __init__(self) -> None:
        super().__init__("Output")
        layout = QFormLayout(self)
        self.device_combo = OptionCombo()
        self.device_combo.setAccessibleName("Device")
        self.device_combo.choice_changed.connect(lambda _: self.device_changed.emit())
        layout.addRow("Device", self.device_combo)
        self.dtype_combo = OptionCombo()
        self.dtype_combo.setAccessibleName("Output dtype")
        self.dtype_combo.choice_changed.connect(lambda _: self.dtype_changed.emit())
        layout.addRow("Output dtype", self.dtype_combo)
        self.dtype_note = WrappingLabel()
        layout.addRow("", self.dtype_note)
        folder_row = QHBoxLayout()
        self.output_edit = QLineEdit(accessibleName="Output folder")
        self.output_edit.textChanged.connect(lambda _: self.folder_changed.emit())
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        folder_row.addWidget(self.output_edit, 1)
        folder_row.addWidget(browse)
        layout.addRow("Output folder", folder_row)
        self.overwrite_check = QCheckBox("Replace the folder if it already exists")
        self.overwrite_check.setToolTip("Only an earlier Mergesmith output is replaced, and only once the merge is done")
        self.overwrite_check.toggled.connect(lambda _: self.folder_changed.emit())
        layout.addRow("", self.overwrite_check)
        self.output_message = WrappingLabel(visible=False)
        layout.addRow("", self.output_message)
        self._sizes: dict[str | None, int] = {}

    @property
    def device(self) -> str:
        return self.device_combo.value() or "cpu"

    def refresh_capabilities(self, probe: Any, wanted: str | None, sizes: dict[str | None, int] | None = None) -> None:
        """Offer the devices and dtypes `probe` found usable for merging, keeping `wanted` (the recipe's), each
        dtype with the output's size in it (`sizes`, from the last check; kept until a check brings new ones)."""
        if sizes is not None:
            self._sizes = sizes
        self.device_combo.set_choices(device_choices(probe, "merge"))
        self.dtype_combo.set_choices(dtype_choices(probe, "merge", self.device, WRITABLE, "Same as the models",
                                                   self._sizes), keep=wanted)
        self.show_dtype_note(probe, wanted)

    def show_dtype_note(self, probe: Any, wanted: str | None) -> None:
        """Say how the output dtype is used, or why the recipe's `wanted` one cannot be used here."""
        if probe is None:
            self.dtype_note.setText("Checking what this machine supports…")
            set_status_style(self.dtype_note, "muted")
        elif wanted and not self.dtype_combo.is_enabled_choice(wanted):
            from guiapp.system.capabilities import option

            reason = option(probe, "merge", self.device, wanted).reason if wanted in WRITABLE else \
                "it is not a dtype a recipe can store"
            self.dtype_note.setText(f"The recipe asks for {wanted}, which cannot be used on {self.device}: {reason}. "
                                    "Pick another output dtype or device.")
            set_status_style(self.dtype_note, "problem")
        else:
            self.dtype_note.setText("Every merge is computed in float32, then stored in the output dtype.")
            set_status_style(self.dtype_note, "muted")

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Where to create the merged model", str(default_output_folder()))
        if folder:
            self.output_edit.setText(str(Path(folder) / "merged-model"))


def default_output_folder() -> Path:
    """Where outputs go unless the user picks another folder (the Settings page's choice)."""
    return Path(QSettings().value("paths/output", str(home_dir() / "Mergesmith")))
