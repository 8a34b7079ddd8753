"""The Models page: search the Hub as you type, read a model's details (with a fit badge for this machine),
and manage what is on this computer: the live model library (On this computer: downloads, added folders,
Mergesmith's outputs) and the added Local folders.

One widget per tab (model_search, model_downloaded, model_folders; the details pane is model_details). Every Hub
request is awaited off the UI thread; a newer search cancels older ones. Actions hand a model reference to the
other pages: Use as base, Add to merge, Extract LoRA from this.
"""

from __future__ import annotations

from PySide6.QtWidgets import QTabWidget, QVBoxLayout, QWidget

from guiapp.ui.pages.model_downloaded import DownloadedTab
from guiapp.ui.pages.model_folders import LocalFoldersTab
from guiapp.ui.pages.model_search import HubSearchTab

SEARCH_TAB, DOWNLOADED_TAB, FOLDERS_TAB = range(3)


class ModelsPage(QWidget):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.hub = HubSearchTab(state)
        self.details_pane = self.hub.details_pane
        self.downloaded = DownloadedTab(state)
        self.folders = LocalFoldersTab(state)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.hub, "Search the Hub")
        self.tabs.addTab(self.downloaded, "On this computer")
        self.tabs.addTab(self.folders, "Local folders")
        self.tabs.currentChanged.connect(self._tab_changed)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)

    def focus_search(self) -> None:
        self.tabs.setCurrentIndex(SEARCH_TAB)
        self.hub.search_edit.setFocus()
        self.hub.search_edit.selectAll()

    def _tab_changed(self, index: int) -> None:
        if index == DOWNLOADED_TAB:
            self.downloaded.refresh_cache()
        elif index == FOLDERS_TAB:
            self.folders.refresh_local()
