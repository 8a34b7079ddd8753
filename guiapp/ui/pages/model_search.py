"""The Models page's "Search the Hub" tab: search as you type with sort and filters, results, and the details
pane of the selected model.

A search is a coroutine awaited on the Qt loop (the Hub request runs on a worker thread); typing again cancels
the one in flight, so only the newest search's results are ever shown.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.pages.model_details import ModelDetailsPane, count_text
from guiapp.ui.text import error_text
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.wrapping_label import WrappingLabel

SEARCH_DELAY_MS = 350
SIZE_FILTERS = {"Any size": (None, None), "Under 1B parameters": (None, 1_000_000_000),
                "1B to 10B": (1_000_000_000, 10_000_000_000), "Over 10B": (10_000_000_000, None)}
COLUMNS = ("Model", "Size", "Parameters", "Fit", "Downloads", "Likes", "Updated", "Gated")
NAME_COLUMN, FIT_COLUMN, GATED_COLUMN = 0, 3, 7
BASES_ROLE = Qt.ItemDataRole.UserRole + 1  # the base models a result's tags name
# The Fit column by the download's verdict against the cache's free disk (FitLevel names).
FIT_CELLS = {"FITS_IN_RAM": ("Fits", "The download fits the free disk; open the model to see the memory it needs"),
             "TIGHT": ("Tight", "The download takes nearly all of the free disk"),
             "WILL_NOT_FIT": ("✗ Disk too small", "The download is larger than the free disk")}
SORTS = (("Trending", "trending"), ("Most downloads", "downloads"), ("Most likes", "likes"),
         ("Recently updated", "updated"))


class HubSearchTab(QWidget):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._search: Any = None  # guiapp.hub.search.ModelSearch, made on first use
        self._results: Any = None  # the newest search's SearchResults (pages are fetched from it)
        self._searcher = LatestTask(SEARCH_DELAY_MS, self)
        self.search_edit = QLineEdit(placeholderText="Search models on the Hugging Face Hub (Ctrl+F)",
                                     accessibleName="Search models", clearButtonEnabled=True)
        self.search_edit.textChanged.connect(lambda _: self.search())
        self.sort_combo = QComboBox(accessibleName="Sort by")
        for label, key in SORTS:
            self.sort_combo.addItem(label, key)
        self.sort_combo.currentIndexChanged.connect(lambda _: self.search())
        self.size_combo = QComboBox(accessibleName="Model size")
        self.size_combo.addItems(list(SIZE_FILTERS))
        self.size_combo.currentIndexChanged.connect(lambda _: self.search())
        self.hide_gated = QCheckBox("Hide gated")
        self.hide_gated.setToolTip("Gated models need you to accept a licence on their Hub page first")
        self.hide_gated.toggled.connect(lambda _: self.search())
        bar = QVBoxLayout()  # the box on its own line, the filters under it: narrow enough for 1024 pixels
        bar.addWidget(self.search_edit)
        filters = QHBoxLayout()
        for widget in (self.sort_combo, self.size_combo, self.hide_gated):
            filters.addWidget(widget)
        filters.addStretch()
        bar.addLayout(filters)

        self.results = QTableWidget(0, len(COLUMNS), accessibleName="Search results")
        self.results.setHorizontalHeaderLabels(list(COLUMNS))
        self.results.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.results.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.results.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)  # add several at once
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.results.verticalHeader().setVisible(False)
        header = self.results.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.results.itemSelectionChanged.connect(self._result_selected)
        self.search_status = WrappingLabel()
        self.more_button = QPushButton("Load more results")
        self.more_button.clicked.connect(self._load_more)
        self.more_button.setVisible(False)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addLayout(bar)
        left_layout.addWidget(self.results, 1)
        left_layout.addWidget(self.search_status)
        left_layout.addWidget(self.more_button)

        self.details_pane = ModelDetailsPane(state)
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(self.details_pane)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)

    def search(self) -> None:
        """Start a search for the box's text (debounced; a search still in flight is cancelled)."""
        low, high = SIZE_FILTERS[self.size_combo.currentText()]
        query = dict(text=self.search_edit.text().strip(), sort=self.sort_combo.currentData(),
                     min_parameters=low, max_parameters=high, gated=False if self.hide_gated.isChecked() else None)
        self.search_status.setText("Searching…")
        set_status_style(self.search_status, "muted")
        self._searcher.request(lambda: self._run_search(query))

    async def _run_search(self, query: dict[str, Any]) -> None:
        from guiapp.jobs import library  # the Hub client loads on first use

        self._search = self._search or library.ModelSearch(page_size=30)
        search = self._search

        def first_page() -> tuple[Any, list[Any], list[Any]]:
            results = search.start(library.SearchQuery(**query))
            page = results.next_page()
            return results, page, _fits(page)

        try:
            self._results, page, fits = await run_blocking(first_page)
        except Exception as error:
            self._search_failed(error)
            return
        self.results.setRowCount(0)
        self._add_results(page, fits)
        shown = self.details_pane.details
        if shown is not None and shown.repo_id not in {summary.repo_id for summary in page}:
            self.details_pane.clear()  # details of a model no longer listed would look like one of the results

    async def _next_page(self, results: Any) -> None:
        def next_page() -> tuple[list[Any], list[Any]]:
            page = results.next_page()
            return page, _fits(page)

        try:
            page, fits = await run_blocking(next_page)
        except Exception as error:
            self._search_failed(error)
            return
        self._add_results(page, fits)

    def _add_results(self, page: list[Any], fits: list[Any]) -> None:
        from guiapp.jobs.library import weights_size  # loaded by the search
        from guiapp.system.units import plural

        for summary, fit in zip(page, fits, strict=True):
            row = self.results.rowCount()
            self.results.insertRow(row)
            downloaded = self._downloaded(summary.repo_id)
            fit_text, fit_tip = (("✓ Downloaded", "Already on this computer: nothing to download") if downloaded
                                 else FIT_CELLS.get(fit.name if fit else "", ("", "")))
            cells = (summary.repo_id, weights_size(summary.parameters_by_dtype), count_text(summary.parameters),
                     fit_text, f"{summary.downloads:,}", f"{summary.likes:,}",
                     summary.last_modified.strftime("%Y-%m-%d") if summary.last_modified else "",
                     "Gated" if summary.gated else "")
            tips = {NAME_COLUMN: summary.repo_id, FIT_COLUMN: fit_tip,
                    GATED_COLUMN: "Accept the licence on the model's Hub page (signed in) to download it"
                    if summary.gated else ""}
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, summary.repo_id)
                item.setData(BASES_ROLE, summary.declared_bases)
                item.setToolTip(tips.get(column, ""))
                self.results.setItem(row, column, item)
        count = self.results.rowCount()
        self.search_status.setText(plural(count, "model") + ("" if self._results.exhausted else " (more available)")
                                   if count else "No models match. Try fewer words or another filter.")
        set_status_style(self.search_status, None)
        self.more_button.setVisible(not self._results.exhausted and count > 0)

    def _downloaded(self, repo_id: str) -> bool:
        entry = self.state.library.find(repo_id)
        return entry is not None and entry.source == "downloaded"

    def _load_more(self) -> None:
        results = self._results
        self._searcher.request(lambda: self._next_page(results))

    def _search_failed(self, error: BaseException) -> None:
        from guiapp.errors import JobCancelled

        if isinstance(error, JobCancelled):
            return  # replaced by a newer search
        self.search_status.setText(error_text(error))
        set_status_style(self.search_status, "problem")

    def _result_selected(self) -> None:
        """Show the details of the row clicked last, and let the pane add every selected model."""
        rows = sorted({index.row() for index in self.results.selectionModel().selectedRows()})
        self.details_pane.set_chosen([(self.results.item(row, NAME_COLUMN).data(Qt.ItemDataRole.UserRole),
                                       self.results.item(row, NAME_COLUMN).data(BASES_ROLE)) for row in rows])
        if rows:
            shown = self.results.currentRow() if self.results.currentRow() in rows else rows[0]
            self.details_pane.open_details(self.results.item(shown, NAME_COLUMN).data(Qt.ItemDataRole.UserRole))


def _fits(page: list[Any]) -> list[Any]:
    """Each result's download against the cache's free disk (runs on the worker thread with the search)."""
    from guiapp.jobs.library import downloads_fit, weights_bytes

    return downloads_fit(weights_bytes(summary.parameters_by_dtype) for summary in page)
