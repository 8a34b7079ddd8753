"""The Jobs page's list as a Qt item model: one row per job record of the bridge, newest first.

Each row reads "<status> · <title>" over "<kind>, <when>" (a running job's status is its stage and share done);
its tooltip is the title and `KEY_ROLE` holds the record's key. The model follows the bridge's signals, so the
view redraws only the rows that changed.
"""

from __future__ import annotations

from datetime import datetime

from PySide6.QtCore import QAbstractListModel, QModelIndex, QObject, QPersistentModelIndex, Qt

from guiapp.jobs.runner import JobStatus
from guiapp.jobs.specs import job_kind

KEY_ROLE = Qt.ItemDataRole.UserRole  # the record's key
STATUS_WORDS = {JobStatus.QUEUED: "Waiting", JobStatus.RUNNING: "Running", JobStatus.DONE: "Done",
                JobStatus.FAILED: "Failed", JobStatus.CANCELLED: "Cancelled", JobStatus.INTERRUPTED: "Interrupted"}


class JobListModel(QAbstractListModel):
    """The records of `bridge` (a `guiapp.ui.job_bridge.JobBridge`), newest first."""

    def __init__(self, bridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._keys = [record.key for record in reversed(bridge.records)]  # the rows, newest first
        bridge.record_added.connect(self._added)
        bridge.record_changed.connect(self._changed)
        bridge.progress.connect(lambda key, _event: self._changed(key))

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._keys)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        record = self.bridge.record(self._keys[index.row()]) if index.isValid() else None
        if record is None:
            return None
        if role == KEY_ROLE:
            return record.key
        if role == Qt.ItemDataRole.ToolTipRole:
            return record.title
        if role == Qt.ItemDataRole.DisplayRole:
            return self._label(record)
        return None

    def row_of(self, key: str | None) -> QModelIndex:
        """The index of the record `key` (invalid when it is not listed)."""
        return self.index(self._keys.index(key)) if key in self._keys else QModelIndex()

    def reload(self) -> None:
        """Read the bridge's records again (after some were cleared)."""
        self.beginResetModel()
        self._keys = [record.key for record in reversed(self.bridge.records)]
        self.endResetModel()

    def _label(self, record) -> str:
        when = datetime.fromtimestamp(record.created).strftime("%d %b %H:%M")
        status = STATUS_WORDS.get(record.status, record.status)
        latest = self.bridge.latest.get(record.key)
        if record.status == JobStatus.RUNNING and latest is not None:
            status = f"{latest.stage} {latest.fraction:.0%}"
        return f"{status} · {record.title}\n{job_kind(record.kind).words}, {when}"

    def _added(self, key: str) -> None:
        self.beginInsertRows(QModelIndex(), 0, 0)  # newest first
        self._keys.insert(0, key)
        self.endInsertRows()

    def _changed(self, key: str) -> None:
        index = self.row_of(key)
        if index.isValid():
            self.dataChanged.emit(index, index, [Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole])
