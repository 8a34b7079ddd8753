"""Help › Recipe format opens docs/recipes.md, or says where it is when nothing can open it."""

from __future__ import annotations

from PySide6.QtCore import QObject, QUrl, Slot
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QApplication, QMessageBox

from guiapp.docs_recipes import DOCUMENT


def _help_action(window, text: str):
    help_menu = next(action.menu() for action in window.menuBar().actions() if action.text() == "&Help")
    return next(action for action in help_menu.actions() if action.text() == text)


class _Opened(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url)


def test_recipe_format_opens_the_page(window):
    opened = _Opened()
    QDesktopServices.setUrlHandler("file", opened, "open")
    try:
        _help_action(window, "&Recipe format").trigger()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert [url.toLocalFile() for url in opened.urls] == [str(DOCUMENT)]


def test_recipe_format_shows_the_path_when_nothing_opens_it(window, qtbot):
    # The offscreen platform of the tests has no program to open documents with, as a bare desktop may not.
    _help_action(window, "&Recipe format").trigger()
    qtbot.waitUntil(lambda: isinstance(QApplication.activeModalWidget(), QMessageBox), timeout=10_000)
    note = QApplication.activeModalWidget()
    assert str(DOCUMENT) in note.text()
    note.accept()
