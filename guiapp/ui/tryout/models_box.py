"""The Try page's models box: up to four model pickers, the device and dtype to run them in, and Publish."""

from __future__ import annotations

from PySide6.QtWidgets import QGridLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton, QWidget

from guiapp.jobs.tryout import MAX_MODELS
from guiapp.ui.widgets.model_picker import ModelPicker
from guiapp.ui.widgets.options import OptionCombo


class TryModelsBox(QGroupBox):
    """The models to compare (a folder, a Hub id, or BASE+ADAPTER each) and where they run."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Models to compare (one to four: a folder, a Hub id, or BASE+ADAPTER)", parent)
        grid = QGridLayout(self)
        self.pickers = [ModelPicker() for _ in range(MAX_MODELS)]
        for index, picker in enumerate(self.pickers):
            grid.addWidget(QLabel(f"{index + 1}."), index // 2, (index % 2) * 2)
            grid.addWidget(picker, index // 2, (index % 2) * 2 + 1)
        self.device = OptionCombo()
        self.dtype = OptionCombo()
        settings_row = QHBoxLayout()
        settings_row.addWidget(QLabel("Device"))
        settings_row.addWidget(self.device, 1)  # the spare room: a device's name is long ("CPU: …, 25.3 GB RAM")
        settings_row.addWidget(QLabel("Dtype"))
        settings_row.addWidget(self.dtype)
        self.publish_button = QPushButton("Publish the last model…")
        self.publish_button.setToolTip("Publish the last model of the list (a folder on this computer; for "
                                       "BASE+ADAPTER, the adapter) to the Hugging Face Hub")
        settings_row.addWidget(self.publish_button)
        grid.addLayout(settings_row, 2, 0, 1, 4)

    def references(self) -> list[str]:
        """The chosen models, in the order of the pickers, empty ones left out."""
        return [picker.text() for picker in self.pickers if picker.text()]

    def set_references(self, references: list[str]) -> None:
        """Show `references` in the pickers (the rest emptied) without each picker announcing its change."""
        for picker, reference in zip(self.pickers, [*references, *[""] * MAX_MODELS]):
            picker.set_text(reference, notify=False)
