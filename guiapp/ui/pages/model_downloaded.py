"""The Models page's "Downloaded" tab: the Hugging Face cache with sizes, hand-over to the other pages, and delete.

Reading the cache and deleting from it are awaited off the UI thread; a newer refresh cancels an older one.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.text import error_text


class DownloadedTab(QWidget):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._reader = LatestTask(0, self)
        self.cache_table = QTableWidget(0, 4, accessibleName="Downloaded models")
        self.cache_table.setHorizontalHeaderLabels(["Model", "Size", "Last used", "Versions"])
        self.cache_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.cache_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.cache_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.cache_table.verticalHeader().setVisible(False)
        self.cache_table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.cache_status = QLabel(wordWrap=True)
        buttons = QHBoxLayout()
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(lambda: self.refresh_cache())
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setToolTip("Delete the selected model from the Hugging Face cache")
        self.delete_button.clicked.connect(lambda: self._reader.request(self._plan_deletion))
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

    def refresh_cache(self, note: str = "") -> None:
        """List the cache again; `note` (what was just done) is shown after the totals."""
        self.cache_status.setText("Reading the cache…")
        self._reader.request(lambda: self._refresh(note))

    async def _refresh(self, note: str) -> None:
        from guiapp.jobs import library  # noqa: PLC0415 - the Hub client loads on first use

        try:
            models = await run_blocking(library.scan_cache)
        except Exception as error:  # an unreadable cache folder: said under the table
            self.cache_status.setText(error_text(error))
            return
        self._show(models, library.cache_folder(), note)

    def _show(self, models: list[Any], folder: Any, note: str) -> None:
        from guiapp.system.units import format_bytes  # noqa: PLC0415

        self.cache_table.setRowCount(0)
        for model in models:
            row = self.cache_table.rowCount()
            self.cache_table.insertRow(row)
            for column, text in enumerate((model.repo_id, format_bytes(model.size),
                                           model.last_used.strftime("%Y-%m-%d %H:%M"), str(len(model.revisions)))):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, model.repo_id)
                self.cache_table.setItem(row, column, item)
        total = sum(m.size for m in models)
        self.cache_status.setText((f"{len(models)} models, {format_bytes(total)} in {folder}."
                                   if models else "No models downloaded yet.") + (f" {note}" if note else ""))

    def _selected(self) -> str | None:
        items = self.cache_table.selectedItems()
        return items[0].data(Qt.ItemDataRole.UserRole) if items else None

    def _hand_over(self, signal) -> None:
        if repo_id := self._selected():
            signal.emit(repo_id)

    async def _plan_deletion(self) -> None:
        from guiapp.jobs import library  # noqa: PLC0415

        repo_id = self._selected()
        if not repo_id:
            return
        try:
            plan = await run_blocking(library.plan_deletion, repo_id)
        except Exception as error:
            self.cache_status.setText(error_text(error))
            return
        # Asked outside the coroutine: a modal dialog runs a nested event loop, inside which no task may step.
        QTimer.singleShot(0, self, lambda: self._confirm_deletion(plan))

    def _confirm_deletion(self, plan: Any) -> None:
        from guiapp.system.units import format_bytes  # noqa: PLC0415

        question = (f"Delete {plan.repo_id} ({len(plan.commits)} versions) from the cache?\n"
                    f"This frees {format_bytes(plan.freed_bytes)}. You can download it again later.")
        if QMessageBox.question(self, "Delete a downloaded model", question) == QMessageBox.StandardButton.Yes:
            self._reader.request(lambda: self._delete(plan))

    async def _delete(self, plan: Any) -> None:
        from guiapp.system.units import format_bytes  # noqa: PLC0415

        try:
            await run_blocking(plan.execute)
        except Exception as error:
            self.cache_status.setText(error_text(error))
            return
        self.refresh_cache(f"Deleted {plan.repo_id}; freed {format_bytes(plan.freed_bytes)}.")
