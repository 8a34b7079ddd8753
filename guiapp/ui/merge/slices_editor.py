"""The Merge page's slices as a table: one row per slice, the model it takes layers from and which layers (from,
and up to but not including, to), rows added and removed with buttons. It reads and writes the same `slices:`
value the recipe's YAML holds; slices the table cannot show (several models in one slice, values per slice) are
edited as YAML."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.ui.widgets.elided_line_edit import ElidedLineEdit

MAX_LAYER = 100_000  # above any model's layer count: the recipe check says when a range is past the model's end
ROW_HEIGHT = 32
SHOWN_ROWS = (2, 8)  # the table is as tall as its rows, at least the first and at most the second (then scrolls)


def table_rows(slices: Any) -> list[tuple[str, int, int]] | None:
    """`slices` as (model, from layer, to layer) rows; None when the table cannot show them (a slice with several
    models or with values of its own, a range that is not two whole numbers, anything not a list of slices)."""
    if not isinstance(slices, list):
        return None
    rows = []
    for entry in slices:
        sources = entry.get("sources") if isinstance(entry, dict) and set(entry) == {"sources"} else None
        if not isinstance(sources, list) or len(sources) != 1 or not isinstance(sources[0], dict):
            return None
        source = sources[0]
        span = source.get("layer_range")
        if set(source) != {"model", "layer_range"} or not isinstance(source["model"], str) or not (
                isinstance(span, list) and len(span) == 2 and all(type(n) is int for n in span)):
            return None
        rows.append((source["model"], span[0], span[1]))
    return rows


def slices_of(rows: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    """The `slices:` value of (model, from layer, to layer) rows: one slice of one model each."""
    return [{"sources": [{"model": model, "layer_range": [start, end]}]} for model, start, end in rows]


class SlicesTable(QWidget):
    """The rows, and "Add slice" below them. `edited` carries the new `slices:` value after each user edit."""

    edited = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.table = QTableWidget(0, 4, accessibleName="Slices")
        self.table.setHorizontalHeaderLabels(["Model", "From layer", "To layer", ""])
        self.table.horizontalHeaderItem(1).setToolTip("The first layer this slice takes (the first layer is 0).")
        self.table.horizontalHeaderItem(2).setToolTip("The layer the slice stops before: 0 to 8 takes layers 0 to 7.")
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in (1, 2, 3):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        layout.addWidget(self.table)
        self._fit_height()
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add slice")
        self.add_button.setToolTip("A new slice after the last: the same model, from the layer the last one stops at")
        self.add_button.clicked.connect(self._add_clicked)
        buttons.addWidget(self.add_button)
        buttons.addStretch()
        layout.addLayout(buttons)
        self._showing = False

    def rows(self) -> list[tuple[str, int, int]]:
        """The rows as shown: (model, from layer, to layer)."""
        return [(self.table.cellWidget(r, 0).text().strip(), self.table.cellWidget(r, 1).value(),
                 self.table.cellWidget(r, 2).value()) for r in range(self.table.rowCount())]

    def show_rows(self, rows: list[tuple[str, int, int]]) -> None:
        """Show `rows` without reporting an edit."""
        self._showing = True
        try:
            self.table.setRowCount(0)
            for row in rows:
                self._append(*row)
            self._fit_height()
        finally:
            self._showing = False

    def _fit_height(self) -> None:
        rows = min(max(self.table.rowCount(), SHOWN_ROWS[0]), SHOWN_ROWS[1])
        frame = 2 * self.table.frameWidth()
        self.table.setFixedHeight(self.table.horizontalHeader().sizeHint().height() + rows * ROW_HEIGHT + frame)

    def _append(self, model: str, start: int, end: int) -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        name = ElidedLineEdit(model)  # elided in the middle, the whole reference in its tooltip
        name.setPlaceholderText("org/name or a folder")
        name.setAccessibleName(f"Slice {row + 1} model")
        name.textEdited.connect(lambda _: self._changed())
        self.table.setCellWidget(row, 0, name)
        for column, value, what in ((1, start, "from layer"), (2, end, "to layer")):
            box = QSpinBox(minimum=0, maximum=MAX_LAYER, value=value, accessibleName=f"Slice {row + 1} {what}")
            box.valueChanged.connect(lambda _: self._changed())
            self.table.setCellWidget(row, column, box)
        remove = QToolButton(text="✕", accessibleName="Remove slice", autoRaise=True)
        remove.setToolTip("Remove this slice")
        remove.clicked.connect(lambda: self._remove(remove))
        self.table.setCellWidget(row, 3, remove)
        self.table.setRowHeight(row, ROW_HEIGHT)
        self._fit_height()

    def _add_clicked(self) -> None:
        rows = self.rows()
        model, _, end = rows[-1] if rows else ("", 0, 0)
        self._append(model, end, end + 1)
        self.table.cellWidget(self.table.rowCount() - 1, 0 if not model else 2).setFocus()
        self._changed()

    def _remove(self, button: QToolButton) -> None:
        for row in range(self.table.rowCount()):
            if self.table.cellWidget(row, 3) is button:
                self.table.removeRow(row)
                break
        self._fit_height()
        self._changed()

    def _changed(self) -> None:
        if not self._showing:
            self.edited.emit(slices_of(self.rows()) or None)
