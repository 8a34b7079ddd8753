"""The one live model library of the window: a Qt table model over `guiapp.jobs.library.library_entries()`.

Every model picker (Merge, LoRA, Try) and the Models page's "On this computer" tab show this one model, so a
model that a download, merge, extraction or apply just finished appears everywhere at once, and one deleted
from the cache disappears everywhere. The list is read again off the UI thread (`run_blocking`) whenever a job
that changes what is on disk finishes, or when a page asks (`refresh()`); a newer refresh cancels an older one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)

from guiapp.ui.background import LatestTask, run_blocking

REFERENCE_ROLE = Qt.ItemDataRole.UserRole  # the Hub id or folder a job takes
SORT_ROLE = Qt.ItemDataRole.UserRole + 1  # a value that sorts the column (bytes, seconds)
COLUMNS = ("Model", "Where", "Size", "Last changed")
NAME, WHERE, SIZE, CHANGED = range(len(COLUMNS))
# Jobs whose end changes what is on disk.
CHANGING_KINDS = ("download", "merge", "extract", "apply", "moe")
REFRESH_DELAY_MS = 100


class LibraryModel(QAbstractTableModel):
    """The models on this computer, one row each (`guiapp.jobs.library.LibraryEntry`).

    `outputs` returns the folders finished jobs wrote (newest first): they are listed while they still hold
    Mergesmith's marker.
    """

    refreshed = Signal()  # the rows were read again

    def __init__(self, outputs: Callable[[], Iterable[str]] = tuple, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._outputs = outputs
        self._entries: list[Any] = []
        self._reader = LatestTask(REFRESH_DELAY_MS, self)
        self.loaded = False  # read at least once

    # --- reading -----------------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the library again in the background; `refreshed` is emitted when the rows are shown."""
        outputs = [str(folder) for folder in self._outputs() if folder]
        self._reader.request(lambda: self._read(outputs))

    async def _read(self, outputs: list[str]) -> None:
        from guiapp.jobs.library import library_entries  # the Hub client loads on first use

        self.set_entries(await run_blocking(library_entries, [Path(folder) for folder in outputs]))

    def set_entries(self, entries: list[Any]) -> None:
        """Show `entries` (LibraryEntry) instead of the current rows."""
        self.beginResetModel()
        self._entries = list(entries)
        self.endResetModel()
        self.loaded = True
        self.refreshed.emit()

    @property
    def entries(self) -> list[Any]:
        return list(self._entries)

    def entry(self, row: int) -> Any:
        return self._entries[row]

    def find(self, reference: str) -> Any:
        """The entry whose reference is `reference`, or None."""
        return next((e for e in self._entries if e.reference == reference), None)

    # --- Qt's model interface ------------------------------------------------------------------------------------

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._entries)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._entries):
            return None
        entry = self._entries[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return _cell(entry, index.column())
        if role == Qt.ItemDataRole.EditRole:  # what an editable picker puts in its field
            return entry.reference
        if role == Qt.ItemDataRole.ToolTipRole:
            return describe_entry(entry)
        if role == REFERENCE_ROLE:
            return entry.reference
        if role == SORT_ROLE:
            return {SIZE: entry.size, CHANGED: entry.modified}.get(index.column(), _cell(entry, index.column()))
        return None


def describe_entry(entry: Any) -> str:
    """The full story of an entry, for its tooltip: the reference in full, where it is, its size, its base."""
    from guiapp.system.units import format_bytes

    lines = [entry.reference, f"{entry.where} · {'LoRA adapter' if entry.kind == 'adapter' else 'model'} · "
             f"{format_bytes(entry.size)}"]
    if entry.reference != str(entry.folder):
        lines.append(f"In {entry.folder}")
    if entry.base_model:
        lines.append(f"Made for the base model {entry.base_model}")
    return "\n".join(lines)


def _cell(entry: Any, column: int) -> str:
    from guiapp.system.units import format_bytes

    if column == NAME:
        return entry.name + (" (LoRA adapter)" if entry.kind == "adapter" else "")
    if column == WHERE:
        return entry.where
    if column == SIZE:
        return format_bytes(entry.size)
    return datetime.fromtimestamp(entry.modified).strftime("%Y-%m-%d %H:%M")


class LibraryFilter(QSortFilterProxyModel):
    """The library's rows of some kinds ("model", "adapter") and sources, sortable by `SORT_ROLE`."""

    def __init__(self, library: LibraryModel, kinds: Iterable[str] = ("model", "adapter"),
                 sources: Iterable[str] | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.kinds = tuple(kinds)
        self.sources = tuple(sources) if sources is not None else None
        self.setSortRole(SORT_ROLE)
        self.setSourceModel(library)

    def filterAcceptsRow(self, row: int, parent: QModelIndex | QPersistentModelIndex) -> bool:  # noqa: N802
        entry = self.sourceModel().entry(row)
        return entry.kind in self.kinds and (self.sources is None or entry.source in self.sources)
