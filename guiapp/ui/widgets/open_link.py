"""Opening a folder or a web page with the system's program, and what the window shows when there is none.

`QDesktopServices.openUrl` returns False when no program opens the address (no file manager or browser, as on a
bare server or in a container). Then `LinkFallback` says so and shows the path or address in a selectable field
with a Copy button, instead of the click doing nothing.
"""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QPushButton, QVBoxLayout, QWidget

from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.wrapping_label import WrappingLabel


class LinkFallback(QWidget):
    """Hidden until an address could not be opened; then "<what> could not be opened…", the address, Copy."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = WrappingLabel()
        set_status_style(self.message, "warning")
        self.address = QLineEdit(readOnly=True, accessibleName="Address to copy")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the address to the clipboard")
        self.copy_button.clicked.connect(self.copy)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.address, 1)
        row.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.message)
        layout.addLayout(row)
        self.setVisible(False)

    def open(self, url: QUrl, what: str) -> bool:
        """Open `url` with the system's program; when none opens it, show why and the address. Returns whether
        it opened."""
        if QDesktopServices.openUrl(url):
            self.setVisible(False)
            return True
        address = url.toLocalFile() if url.isLocalFile() else url.toString()
        self.message.setText(f"No program to open {what} was found on this computer. Copy the "
                             f"{'path' if url.isLocalFile() else 'address'} and open it yourself:")
        self.address.setText(address)
        self.address.setCursorPosition(0)
        self.setVisible(True)
        return False

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.address.text())
        self.copy_button.setText("Copied")

    def hide_address(self) -> None:
        self.setVisible(False)
        self.copy_button.setText("Copy")
