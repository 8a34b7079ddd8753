"""The Models page's "On this computer" tab: the window's live model library (downloaded models, added folders,
outputs Mergesmith wrote) with where each is and its size, hand-over to the other pages, and deleting a
downloaded model from the Hugging Face cache.

The rows are the shared `LibraryModel` (guiapp/ui/library_model.py): they follow downloads, merges and deletions
without a refresh. Planning and deleting are awaited off the UI thread.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QMessageBox,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.library_model import CHANGED, NAME, LibraryFilter
from guiapp.ui.text import error_text
from guiapp.ui.widgets.wrapping_label import WrappingLabel

# What Delete… can delete: downloads (from the Hugging Face cache) and what Mergesmith made; never a folder the
# user added, which only leaves the list.
DELETABLE = ("downloaded", "output")


class DownloadedTab(QWidget):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._deleter = LatestTask(0, self)
        self._note = ""
        self.rows = LibraryFilter(state.library, parent=self)
        self.cache_table = QTableView(accessibleName="Models on this computer")
        self.cache_table.setModel(self.rows)
        self.cache_table.setSortingEnabled(True)
        self.cache_table.sortByColumn(CHANGED, Qt.SortOrder.DescendingOrder)  # the newest first
        self.cache_table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.cache_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.cache_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.cache_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.cache_table.verticalHeader().setVisible(False)
        header = self.cache_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)
        self.cache_table.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())
        self.cache_status = WrappingLabel()
        buttons = QHBoxLayout()
        refresh = QPushButton("Refresh")
        refresh.setToolTip("Look at the disk again (the list also follows downloads and jobs by itself)")
        refresh.clicked.connect(lambda: self.refresh_cache())
        self.delete_button = QPushButton("Delete…", enabled=False)
        self.delete_button.setToolTip("Delete the selected downloaded model from the Hugging Face cache, or a model "
                                      "or adapter Mergesmith made")
        self.delete_button.clicked.connect(lambda: self._deleter.request(self._plan_deletion))
        cached_base = QPushButton("Use as base")
        cached_base.clicked.connect(lambda: self._hand_over(state.use_as_base))
        cached_add = QPushButton("Add to merge")
        cached_add.clicked.connect(lambda: self._hand_over(state.add_to_merge))
        for button in (refresh, self.delete_button, cached_base, cached_add):
            buttons.addWidget(button)
        buttons.addStretch()
        layout = QVBoxLayout(self)
        layout.addWidget(self.cache_table, 1)
        layout.addWidget(self.cache_status)
        layout.addLayout(buttons)
        state.library.refreshed.connect(self._show_totals)
        self._show_totals()

    def refresh_cache(self, note: str = "") -> None:
        """Read the library again; `note` (what was just done) is shown after the totals."""
        self._note = note
        self.cache_status.setText("Looking at the disk…")
        self.state.library.refresh()

    def _show_totals(self) -> None:
        from guiapp.system.units import format_bytes, plural

        entries = self.state.library.entries
        if not self.state.library.loaded:
            self.cache_status.setText("Looking at the disk…")
            return
        downloaded = [e for e in entries if e.source == "downloaded"]
        cache = (f"; {len(downloaded)} downloaded, {format_bytes(sum(e.size for e in downloaded))} in the download "
                 "cache" if downloaded else "")
        text = (f"{plural(len(entries), 'model')} on this computer{cache}." if entries
                else "No models on this computer yet: download one, add a folder, or run a job.")
        self.cache_status.setText(text + (f" {self._note}" if self._note else ""))
        self._note = ""
        self._selection_changed()

    def select_reference(self, reference: str) -> bool:
        """Select the row of `reference`; False when it is not listed."""
        for row in range(self.rows.rowCount()):
            if self.rows.index(row, NAME).data(Qt.ItemDataRole.EditRole) == reference:
                self.cache_table.selectRow(row)
                return True
        return False

    def _selected(self) -> Any:
        rows = self.cache_table.selectionModel().selectedRows()
        if not rows:
            return None
        return self.state.library.entry(self.rows.mapToSource(rows[0]).row())

    def _selection_changed(self) -> None:
        entry = self._selected()
        self.delete_button.setEnabled(entry is not None and entry.source in DELETABLE)

    def _hand_over(self, signal) -> None:
        if entry := self._selected():
            signal.emit(entry.reference)

    async def _plan_deletion(self) -> None:
        from guiapp.jobs import library

        entry = self._selected()
        if entry is None or entry.source not in DELETABLE:
            return
        plan_deletion = library.plan_deletion if entry.source == "downloaded" else library.plan_output_deletion
        try:
            plan = await run_blocking(plan_deletion, entry.reference)
        except Exception as error:
            self.cache_status.setText(error_text(error))
            return
        # Asked outside the coroutine: a modal dialog runs a nested event loop, inside which no task may step.
        QTimer.singleShot(0, self, lambda: self._confirm_deletion(entry, plan))

    def _confirm_deletion(self, entry: Any, plan: Any) -> None:
        from guiapp.system.units import format_bytes, plural

        if entry.source == "downloaded":
            title = "Delete a downloaded model"
            question = (f"Delete {plan.repo_id} ({plural(len(plan.commits), 'version')}) from the download cache?\n"
                        f"This frees {format_bytes(plan.freed_bytes)}. You can download it again later.")
        else:
            title = f"Delete {'an adapter' if entry.kind == 'adapter' else 'a model'} Mergesmith made"
            question = (f"Delete {entry.name}, {plan.description}?\n\n{plan.folder}\n\nThis frees "
                        f"{format_bytes(plan.freed_bytes)} and cannot be undone: running the job again makes it anew.")
        box = QMessageBox(QMessageBox.Icon.Question, title, question,
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, self)
        box.button(QMessageBox.StandardButton.Yes).setText("Delete")
        box.button(QMessageBox.StandardButton.No).setText("Keep it")
        box.setDefaultButton(QMessageBox.StandardButton.No)
        if box.exec() == QMessageBox.StandardButton.Yes:
            self._deleter.request(lambda: self._delete(entry, plan))

    async def _delete(self, entry: Any, plan: Any) -> None:
        from guiapp.system.units import format_bytes

        try:
            await run_blocking(plan.execute)
        except Exception as error:
            self.cache_status.setText(error_text(error))
            return
        self.refresh_cache(f"Deleted {entry.name}; freed {format_bytes(plan.freed_bytes)}.")
