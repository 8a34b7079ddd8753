"""Help's pages (Getting started, Recipe format) shown inside the window: a bare desktop may have no program that
opens a Markdown file, and a user should not need one to read the help."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout, QWidget

from guiapp.ui.resource_files import help_document


class HelpViewer(QDialog):
    """One help page, rendered from its Markdown; links to the web open in the browser."""

    def __init__(self, title: str, document: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"{title} — Mergesmith")
        self.resize(760, 640)
        self.browser = QTextBrowser(openExternalLinks=True, accessibleName=title)
        try:
            self.browser.setMarkdown(help_document(document).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            self.browser.setPlainText(f"This help page could not be read: {error}")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.browser)
        layout.addWidget(buttons)
