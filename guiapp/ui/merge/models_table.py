"""The Merge page's models table: one row per model with its reference and the method's per-model parameters.

The table shows and edits rows; the recipe document (`guiapp.jobs.recipe_document`) decides what they mean.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QSizePolicy, QTableWidget, QToolButton, QWidget

from guiapp.jobs.plain_words import parameter_label, parameter_tooltip
from guiapp.jobs.recipe_document import FormModel
from guiapp.jobs.recipe_fixes import suggested_value
from guiapp.ui.widgets.elided_line_edit import ElidedLineEdit
from guiapp.ui.widgets.param_form import ParamEditor

# The model column never gets narrower than this (its name is elided in the middle), and takes the room the values
# leave; a value column is as wide as its label when there is room, else as its editor (the label elides, its
# tooltip says it whole). The table fits the page's width down to the smallest window: no sideways scrolling.
MODEL_COLUMN_WIDTH = 110
MIN_TABLE_HEIGHT, MAX_TABLE_HEIGHT = 150, 480  # beyond the maximum, the table scrolls its rows


class ModelsTable(QTableWidget):
    changed = Signal()  # a reference or value was edited, or a row removed

    def __init__(self) -> None:
        super().__init__(0, 1)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.verticalHeader().setVisible(False)
        self.setMinimumHeight(MIN_TABLE_HEIGHT)
        # As tall as its rows and no taller: room freed or taken below (a verdict line coming and going) does not
        # resize it.
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        # Tall enough for its rows (a gradient's chart makes a row tall), so no model hides below the first.
        self.verticalHeader().sectionResized.connect(lambda *_: self.updateGeometry())
        self.model().rowsRemoved.connect(lambda *_: self.updateGeometry())
        self._method: Any = None
        self._rows: list[dict[str, Any]] = []  # {"picker": QLineEdit, "editors": {name: ParamEditor}, "extra": {}}

    def set_method(self, method: Any) -> None:
        """Empty the table and give it the columns of `method`'s per-model parameters."""
        self._method = method
        self._rows = []
        specs = method.per_model_params
        self.clear()
        self.setRowCount(0)
        self.setColumnCount(len(specs) + 2)
        self.setHorizontalHeaderLabels(["Model", *[parameter_label(s) for s in specs], ""])
        for column, spec in enumerate(specs, start=1):
            self.horizontalHeaderItem(column).setToolTip(f"{parameter_label(spec)}: "
                                                         f"{parameter_tooltip(spec)}")
        header = self.horizontalHeader()
        header.setMinimumSectionSize(30)
        header.setTextElideMode(Qt.TextElideMode.ElideRight)
        for column in range(len(specs) + 2):  # sized by _fit_columns
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._fit_columns()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        rows = sum(self.rowHeight(row) for row in range(self.rowCount()))
        height = self.horizontalHeader().height() + rows + 2 * self.frameWidth()
        return QSize(self.minimumSizeHint().width(), max(MIN_TABLE_HEIGHT, min(MAX_TABLE_HEIGHT, height)))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        """Narrow enough for the smallest window: the model column at its least, each value at its editor's."""
        scroll_bar = self.verticalScrollBar().sizeHint().width()
        width = MODEL_COLUMN_WIDTH + sum(self._least_width(c) for c in range(1, self.columnCount()))
        return QSize(width + scroll_bar + 2 * self.frameWidth(), super().minimumSizeHint().height())

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._fit_columns()

    def _least_width(self, column: int) -> int:
        """The narrowest `column` can be: its editors' (the Remove button's) smallest width."""
        cells = [cell for row in range(self.rowCount()) if (cell := self.cellWidget(row, column))]
        return max([cell.minimumSizeHint().width() for cell in cells] or [self.horizontalHeader().minimumSectionSize()])

    def _fit_columns(self) -> None:
        """Fit the columns to the viewport's width: Remove as narrow as its button, each value column as wide as
        its label where there is room (else down to its editor's width), the model column the rest."""
        if self.columnCount() < 2:
            return
        header = self.horizontalHeader()
        values = range(1, self.columnCount() - 1)
        remove = self._least_width(self.columnCount() - 1)
        least = {c: self._least_width(c) for c in values}
        wanted = {c: max(least[c], header.sectionSizeHint(c)) for c in values}
        room = self.viewport().width() - remove - MODEL_COLUMN_WIDTH
        extra, needed = sum(wanted.values()) - sum(least.values()), max(0, room - sum(least.values()))
        share = min(1.0, needed / extra) if extra else 1.0
        for c in values:
            self.setColumnWidth(c, least[c] + int((wanted[c] - least[c]) * share))
        self.setColumnWidth(self.columnCount() - 1, remove)
        others = sum(self.columnWidth(c) for c in range(1, self.columnCount()))
        self.setColumnWidth(0, max(MODEL_COLUMN_WIDTH, self.viewport().width() - others))

    def rows(self) -> list[FormModel]:
        """The rows as the recipe document takes them: each reference with its parameters (shown and kept)."""
        return [FormModel(row["picker"].text(), {**row["extra"], **{n: e.value() for n, e in row["editors"].items()
                                                                     if e.value() is not None}})
                for row in self._rows]

    def entries(self) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """Each row as (reference, the shown parameters' values, the kept undeclared ones)."""
        return [(row["picker"].text(), {n: e.value() for n, e in row["editors"].items()}, dict(row["extra"]))
                for row in self._rows]

    def add_row(self, ref: str, values: dict[str, Any], extra: dict[str, Any] | None = None,
                explicit_defaults: bool = False) -> None:
        """Add a row for `ref` showing `values`; `extra` holds parameters the method does not declare (kept as
        given). `explicit_defaults` writes the method's defaults into the row, as when the user adds a model."""
        row = self.rowCount()
        self.insertRow(row)
        picker = ElidedLineEdit(ref)  # the full reference is its tooltip
        picker.setAccessibleName(f"Model {row + 1}")
        picker.textChanged.connect(lambda _: self.changed.emit())
        self.setCellWidget(row, 0, picker)
        editors: dict[str, ParamEditor] = {}
        for column, spec in enumerate(self._method.per_model_params, start=1):
            editor = ParamEditor(spec, compact=True)
            editor.set_value(values.get(spec.name))
            if explicit_defaults and spec.name not in values and (spec.required or spec.default is not None):
                editor.set_value(suggested_value(spec))
                editor.set_explicit_default()
            editor.changed.connect(lambda *_: self.changed.emit())
            self.setCellWidget(row, column, editor)
            editors[spec.name] = editor
        remove = QToolButton(text="✕", accessibleName="Remove", autoRaise=True)
        remove.setToolTip("Remove this model from the merge")
        entry = {"picker": picker, "editors": editors, "extra": dict(extra or {})}
        remove.clicked.connect(lambda: self._remove_row(entry))
        self.setCellWidget(row, len(self._method.per_model_params) + 1, remove)
        for cell in (picker, remove):  # at the top of a row made tall by a chart, beside the values
            cell.setMaximumHeight(cell.sizeHint().height())
        self.setRowHeight(row, max([34, picker.sizeHint().height() + 6,
                                    *(e.sizeHint().height() + 6 for e in editors.values())]))
        self._rows.append(entry)
        self._fit_columns()
        self.updateGeometry()

    def reference_widget(self, row: int) -> QWidget | None:
        """The box holding the `row`-th model's reference (None past the last row)."""
        return self._rows[row]["picker"] if 0 <= row < len(self._rows) else None

    def editor(self, row: int, name: str) -> ParamEditor | None:
        """The `row`-th model's editor of parameter `name` (None when there is no such row or column)."""
        return self._rows[row]["editors"].get(name) if 0 <= row < len(self._rows) else None

    def mark_unused_base_values(self, base: str | None, reason: str) -> None:
        """Disable the per-model values of the row(s) holding `base` (None: no row's values are unused), with
        `reason` as their tooltip; the other rows' values are enabled with their own tooltips."""
        for row in self._rows:
            unused = bool(base) and row["picker"].text().strip() == base
            for editor in row["editors"].values():
                editor.setEnabled(not unused)
                editor.setToolTip(reason if unused else parameter_tooltip(editor.spec))

    def _remove_row(self, entry: dict[str, Any]) -> None:
        index = self._rows.index(entry)
        self._rows.pop(index)
        self.removeRow(index)
        self.changed.emit()
