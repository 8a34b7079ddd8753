"""Help ▸ About: what this Mergesmith is (its version and the torch it computes with), its licence, and links.

"Copy details" puts the same facts on the clipboard as plain text, for a bug report.
"""

from __future__ import annotations

import platform
import sys

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QPixmap
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from guiapp import __version__
from guiapp.ui.resource_files import icon_file
from guiapp.ui.widgets.wrapping_label import WrappingLabel

LICENCE = "Apache-2.0"
LINKS = (
    ("Licence text", "https://www.apache.org/licenses/LICENSE-2.0"),
    ("Hugging Face Hub", "https://huggingface.co/models"),
    ("mergekit (merge methods and recipe format)", "https://github.com/arcee-ai/mergekit"),
    ("PEFT (LoRA adapter format)", "https://github.com/huggingface/peft"),
)


def torch_build() -> str:
    """torch's version and what it was built for, e.g. "2.13.0+cpu (CPU only)" or "2.13.0 (CUDA 12.8)"."""
    import torch  # loaded in the background by the time anyone opens About

    if torch.version.cuda:
        target = f"CUDA {torch.version.cuda}"
    elif getattr(torch.version, "hip", None):
        target = f"ROCm {torch.version.hip}"
    else:
        target = "CPU only" if not torch.backends.mps.is_built() else "CPU and Apple GPU"
    return f"{torch.__version__} ({target})"


def details_text() -> str:
    return "\n".join(
        (
            f"Mergesmith {__version__}",
            f"torch {torch_build()}",
            f"Python {platform.python_version()}, PySide6 {pyside_version}",
            f"{platform.system()} {platform.release()} {platform.machine()}"
            + (" (bundled app)" if getattr(sys, "frozen", False) else ""),
            f"Licence: {LICENCE}",
        )
    )


class AboutDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About Mergesmith")
        self.details = details_text()

        icon = QLabel()
        try:
            icon.setPixmap(QPixmap(str(icon_file(128))))
        except FileNotFoundError:
            pass  # an installation without its icons still shows everything else
        icon.setAlignment(Qt.AlignmentFlag.AlignTop)

        title = QLabel(f"<h2>Mergesmith {__version__}</h2>")
        summary = WrappingLabel("Merge open models and extract LoRA adapters on your own workstation.")
        facts = QLabel(self.details.replace("\n", "<br>"))
        facts.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        links = QLabel("<br>".join(f'<a href="{url}">{text}</a>' for text, url in LINKS))
        links.setOpenExternalLinks(True)

        text = QVBoxLayout()
        for widget in (title, summary, facts, links):
            text.addWidget(widget)
        row = QHBoxLayout()
        row.addWidget(icon)
        row.addLayout(text, 1)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy details", QDialogButtonBox.ButtonRole.ActionRole)
        copy.clicked.connect(self.copy_details)
        buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(buttons)

    def copy_details(self) -> None:
        QGuiApplication.clipboard().setText(self.details)
