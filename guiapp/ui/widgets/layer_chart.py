"""The picture of a parameter that changes across the layers: one curve per list (per filter when the value has
filters), its points draggable up and down. Shown under a number's editor while "Changes across layers" is chosen
(`ParamEditor.gradient_view_factory`); a drag writes the list back through the editor, so the recipe document,
the YAML view and undo follow as for a typed value.

The x axis is the layers of the models being merged when their headers have been read (`set_layer_count`, from
the Merge page's check), else the anchors alone, from the first layer to the last.
"""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtCore import QEvent, QObject, QPointF, Qt, QTimer, Signal
from PySide6.QtWidgets import QTableWidget, QWidget

from guiapp.jobs.layer_gradients import GradientCurve, gradient_curves, with_anchor
from guiapp.ui.widgets.charts import ChartHost, pyqtgraph
from guiapp.ui.widgets.param_form import UNBOUNDED, ParamEditor

CHART_HEIGHT = 150
TABLE_ROW_HEIGHT = 34  # a models table row without a chart (guiapp/ui/merge/models_table.py)
GRAB_DISTANCE = 14  # pixels from a point within which a press takes it


class _LayerCount(QObject):
    """The number of layers of the models on the Merge page (0: not known), shared by every gradient chart."""

    changed = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.count = 0


_LAYERS: _LayerCount | None = None


def _layers() -> _LayerCount:
    global _LAYERS
    if _LAYERS is None:
        _LAYERS = _LayerCount()
    return _LAYERS


def set_layer_count(count: int | None) -> None:
    """Tell the gradient charts how many layers the models have (None or 0: not known; they show anchors only)."""
    layers = _layers()
    if (count or 0) != layers.count:
        layers.count = count or 0
        layers.changed.emit(layers.count)


def install() -> None:
    """Show a gradient chart under every number editor that changes across layers."""
    ParamEditor.gradient_view_factory = GradientChart


class GradientChart(ChartHost):
    """The curves of one `ParamEditor`'s list value."""

    def __init__(self, editor: ParamEditor, parent: QWidget | None = None) -> None:
        super().__init__(CHART_HEIGHT, parent)
        self.editor = editor
        self.setAccessibleName(f"{editor.spec.name} across the layers")
        self.setToolTip("Drag a point up or down to change the value there; the line shows the value at each layer.")
        self.value: Any = None
        self.curves: list[GradientCurve] = []
        self._drag: tuple[int, int] | None = None  # (curve, anchor) being dragged
        self._dragged_value: Any = None
        self._y_range: tuple[float, float] = (0.0, 1.0)
        editor.gradient_changed.connect(self.show_value)
        _layers().changed.connect(self._layers_changed)  # a method: Qt disconnects it when the chart is deleted

    # --- public ---------------------------------------------------------------------------------------------

    @property
    def layer_count(self) -> int:
        return _layers().count

    def show_value(self, value: Any) -> None:
        """Draw `value` (the editor's list)."""
        self.value = value
        self._recompute()

    def anchor_pixel(self, curve: int, anchor: int) -> QPointF:
        """Where anchor `anchor` of curve `curve` is drawn, in the plot's viewport (for tests and tooltips)."""
        return self.to_pixel(*self._anchor_point(self.curves[curve], anchor))

    def showEvent(self, event: QEvent) -> None:
        super().showEvent(event)
        QTimer.singleShot(0, self, self._fit_table_row)  # once the editor's layout counts the chart

    def hideEvent(self, event: QEvent) -> None:
        super().hideEvent(event)
        QTimer.singleShot(0, self, self._fit_table_row)

    # --- drawing ----------------------------------------------------------------------------------------------

    def _fit_table_row(self) -> None:
        """In a table (the per-model parameters), grow or shrink the row to the editor with or without the chart."""
        table = self.parentWidget()
        while table is not None and not isinstance(table, QTableWidget):
            table = table.parentWidget()
        if table is None:
            return
        for row in range(table.rowCount()):
            cells = [cell for column in range(table.columnCount()) if (cell := table.cellWidget(row, column))]
            if any(cell.isAncestorOf(self) for cell in cells):
                needed = max(cell.sizeHint().height() for cell in cells) + 6
                table.setRowHeight(row, max(TABLE_ROW_HEIGHT, needed))

    def configure(self) -> None:
        self.legend = self.plot.addLegend(offset=(40, 1), verSpacing=-6)  # one row along the top
        self.plot.viewport().installEventFilter(self)
        self.plot.viewport().setMouseTracking(True)

    def redraw(self) -> None:
        pg = pyqtgraph()
        self.plot.clear()  # its items leave the legend too
        keyed = len(self.curves) > 1  # one curve needs no key
        self.legend.setVisible(keyed)
        self.legend.setColumnCount(max(1, len(self.curves)))
        self.legend.setLabelTextColor(self.text_colour())
        for index, curve in enumerate(self.curves):
            colour = self.series_colour(index)
            if curve.layer_values:
                x, y = list(range(len(curve.layer_values))), list(curve.layer_values)
            else:
                x = [self._anchor_point(curve, i)[0] for i in range(len(curve.anchors))]
                y = list(curve.anchors)
            self.plot.plot(x, y, pen=pg.mkPen(colour, width=2), name=curve.label)
            points = [self._anchor_point(curve, i) for i in range(len(curve.anchors))]
            self.plot.plot([p[0] for p in points], [p[1] for p in points], pen=None, symbol="o", symbolSize=10,
                           symbolBrush=colour, symbolPen=pg.mkPen(self.palette().base().color(), width=1.5))
        last = self.layer_count - 1 if self.layer_count > 1 else 1
        self.plot.setXRange(0, last, padding=0.04)
        low, high = self._y_range
        # Room above the curves for the key's row, so it never hides a point.
        self.plot.setYRange(low, high + (0.3 * (high - low) if keyed else 0.0), padding=0.08)
        bottom = self.plot.getAxis("bottom")
        bottom.setLabel("layer" if self.layer_count > 1 else "first layer → last layer", color=self.text_colour())
        if self.layer_count <= 1:
            bottom.setTicks([[(0, "first"), (1, "last")]])
        else:  # whole layers only, about six labels
            step = max(1, math.ceil((self.layer_count - 1) / 6))
            bottom.setTicks([[(i, str(i)) for i in range(0, self.layer_count, step)]])

    def _layers_changed(self, _count: int) -> None:
        self._recompute()

    def _recompute(self) -> None:
        shown = self._dragged_value if self._drag is not None else self.value
        self.curves = gradient_curves(shown, self.layer_count or None)
        if self._drag is None:
            self._y_range = self._range_for(self.curves)
        self.refresh()

    def _anchor_point(self, curve: GradientCurve, anchor: int) -> tuple[float, float]:
        span = self.layer_count - 1 if self.layer_count > 1 else 1
        return curve.anchor_position(anchor) * span, curve.anchors[anchor]

    def _range_for(self, curves: list[GradientCurve]) -> tuple[float, float]:
        """The y range: the schema's when it has one, else room around the values (including 0 to 1)."""
        spec = self.editor.spec
        values = [v for c in curves for v in (*c.anchors, *c.layer_values)]
        low = spec.minimum if spec.minimum is not None and spec.minimum > -UNBOUNDED else min([0.0, *values])
        high = spec.maximum if spec.maximum is not None and spec.maximum < UNBOUNDED else max([1.0, *values])
        return float(low), float(high) if high > low else float(low) + 1.0

    # --- dragging ---------------------------------------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.MouseButtonPress and event.button() == Qt.MouseButton.LeftButton:
            return self._press(event.position())
        if kind == QEvent.Type.MouseMove and self._drag is not None:
            self._move(event.position())
            return True
        if kind == QEvent.Type.MouseButtonRelease and self._drag is not None:
            self._move(event.position())
            self._release()
            return True
        return False

    def _press(self, pixel: QPointF) -> bool:
        nearest: tuple[float, int, int] | None = None
        for c, curve in enumerate(self.curves):
            for a in range(len(curve.anchors)):
                point = self.anchor_pixel(c, a)
                distance = ((point.x() - pixel.x()) ** 2 + (point.y() - pixel.y()) ** 2) ** 0.5
                if distance <= GRAB_DISTANCE and (nearest is None or distance < nearest[0]):
                    nearest = (distance, c, a)
        if nearest is None:
            return False
        self._drag = nearest[1], nearest[2]
        self._dragged_value = self.value
        return True

    def _move(self, pixel: QPointF) -> None:
        low, high = self._y_range
        number = min(max(self.to_view(pixel).y(), low), high)
        curve = self.curves[self._drag[0]]
        self._dragged_value = with_anchor(self._dragged_value, curve.entry, self._drag[1], number)
        self._recompute()

    def _release(self) -> None:
        value = self._dragged_value
        self._drag, self._dragged_value = None, None
        if value != self.value:
            self.editor.set_gradient(value)  # one change for the whole drag: one undo step
        else:
            self._recompute()
