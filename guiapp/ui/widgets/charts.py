"""The one way the window makes a chart: a pyqtgraph plot coloured from the palette (light and dark themes),
created ahead of need while the window is idle (`prepare_charts`) or else the first time the chart is shown.

Why pyqtgraph: it is pure Python over Qt, so it works with the PySide6-Essentials wheel Mergesmith ships (QtCharts
lives in the large PySide6-Addons wheel), and it redraws live data (a job's throughput) cheaply.

Loading it costs the UI thread about 0.2 s, most of it PySide6 creating every class of QtCore, QtGui and QtWidgets
that pyqtgraph reads on import. It must happen on the UI thread (on a worker, while the window ran, it crashed the
process), so `load_chart_library` does it after the window shows, in steps of a few milliseconds: the classes a few
dozen at a time, then the import itself (about 0.08 s, once); the plain modules it needs are imported earlier
on a worker thread (`import_what_charts_need`).

Making a plot costs the UI thread about 40 ms and drawing one for the first time more; done when a job's first
progress arrives, that froze the window for 0.2 s. So the window makes its charts' plots once the library is
loaded, one per turn of the event loop, and a chart that is hidden redraws when it is next shown, not each time
its data changes.
"""

from __future__ import annotations

import importlib
from typing import Any

from PySide6.QtCore import QEvent, QPointF, QSize, QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QSizePolicy, QVBoxLayout, QWidget

from guiapp.ui.theme import is_dark

# Series colours that stay distinguishable and legible: (on light, on dark).
_SERIES = (("#1a56c4", "#6ea0f7"), ("#c75000", "#ffa55c"), ("#1b6e20", "#8be28f"), ("#8e24aa", "#d59cf0"),
           ("#00838f", "#6fd6e0"), ("#6d4c41", "#c9a89c"))
MIN_HEIGHT_FRACTION = 0.6
_HIGHLIGHT = ("#b3261e", "#ff8a80")  # what needs attention (the status "problem" colour of guiapp.ui.theme)


def pyqtgraph() -> Any:
    """The pyqtgraph module, configured for the window (imported on first use if `load_chart_library` has not
    loaded it yet). UI thread only."""
    import pyqtgraph as pg

    pg.setConfigOptions(antialias=True)
    return pg


# What pyqtgraph 0.14 imports besides itself and Qt: plain Python, safe on any thread; numpy.typing alone compiles
# 0.1 s of regular expressions. Imported with the engine, so that only pyqtgraph's own modules load on the UI thread.
_PLAIN_MODULES_CHARTS_NEED = ("numpy.typing", "xml.etree.ElementTree", "pydoc", "cProfile")


def import_what_charts_need() -> None:
    """Import the Qt-free modules the chart library needs (any thread; the library itself: `load_chart_library`)."""
    for name in _PLAIN_MODULES_CHARTS_NEED:
        importlib.import_module(name)


_CLASSES_PER_STEP = 25  # about 15 ms of PySide6 creating classes, at worst, on this machine


def load_chart_library(window: QWidget) -> None:
    """Import the chart library on the UI thread in short steps, one per turn of the event loop, then make the
    plots of `window`'s charts (`prepare_charts`); stops by itself if the window goes."""
    import PySide6.QtCore
    import PySide6.QtGui
    import PySide6.QtWidgets

    modules = (PySide6.QtCore, PySide6.QtGui, PySide6.QtWidgets)
    batches = [(module, names[i:i + _CLASSES_PER_STEP]) for module in modules
               for names in [dir(module)] for i in range(0, len(names), _CLASSES_PER_STEP)]

    def next_step() -> None:
        if batches:
            module, names = batches.pop(0)
            for name in names:
                getattr(module, name)
            QTimer.singleShot(0, window, next_step)
        else:
            pyqtgraph()
            prepare_charts(window)

    QTimer.singleShot(0, window, next_step)


class ChartHost(QWidget):
    """A widget holding one plot, built on first show; subclasses draw in `redraw()` (called after creation, on
    a palette change and whenever their data changes) and may set it up further in `configure()`."""

    def __init__(self, height: int, parent: QWidget | None = None, *, shrinks: bool = False) -> None:
        """`height` tall; `shrinks`: down to about two thirds of it when the page is short of room (a page
        without a scroll bar, such as Jobs, stays usable at the smallest window size)."""
        super().__init__(parent)
        self.plot: Any = None  # pyqtgraph.PlotWidget once prepared or shown
        self._stale = False  # data changed while hidden
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._height = height
        self.setMinimumHeight(round(height * MIN_HEIGHT_FRACTION) if shrinks else height)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)

    # --- for subclasses ---------------------------------------------------------------------------------------

    def configure(self) -> None:
        """Set the new plot up (axes, labels, mouse handling)."""

    def redraw(self) -> None:
        """Draw the data on `self.plot` (not called before the plot exists)."""

    def refresh(self) -> None:
        """The data changed: draw it now if the chart is on screen, else when it is next shown."""
        if self.plot is None:
            return
        if self.isVisible():
            self._stale = False
            self.redraw()
        else:
            self._stale = True

    def series_colour(self, index: int) -> str:
        light, dark = _SERIES[index % len(_SERIES)]
        return dark if is_dark(self.palette()) else light

    def highlight_colour(self) -> str:
        light, dark = _HIGHLIGHT
        return dark if is_dark(self.palette()) else light

    def text_colour(self) -> str:
        return self.palette().color(QPalette.ColorRole.WindowText).name()

    def ensure_plot(self) -> Any:
        """The plot, created now if needed."""
        if self.plot is None:
            pg = pyqtgraph()
            self.plot = pg.PlotWidget(parent=self)
            self.plot.setMenuEnabled(False)
            self.plot.hideButtons()
            self.plot.setMouseEnabled(x=False, y=False)
            self._layout.addWidget(self.plot)
            # Shown and sized now, not at the next turn of the event loop: mapping points to pixels needs its size.
            self.plot.show()
            self._layout.activate()
            self.configure()
            self._style()
            self.redraw()
        return self.plot

    def to_view(self, pixel: QPointF) -> QPointF:
        """A point of the plot's viewport in data coordinates."""
        return self.plot.plotItem.vb.mapSceneToView(self.plot.mapToScene(pixel.toPoint()))

    def to_pixel(self, x: float, y: float) -> QPointF:
        """Data coordinates as a point of the plot's viewport."""
        return QPointF(self.plot.mapFromScene(self.plot.plotItem.vb.mapViewToScene(QPointF(x, y))))

    # --- Qt -----------------------------------------------------------------------------------------------------

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self._height)

    def showEvent(self, event: QEvent) -> None:
        if self.plot is None:
            self.ensure_plot()
        elif self._stale:
            self._stale = False
            self.redraw()
        super().showEvent(event)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange and self.plot is not None:
            self._style()
            self.refresh()
        super().changeEvent(event)

    def _style(self) -> None:
        pg = pyqtgraph()
        self.plot.setBackground(self.palette().color(QPalette.ColorRole.Base))
        pen = pg.mkPen(self.text_colour())
        for side in ("left", "bottom"):
            axis = self.plot.getAxis(side)
            axis.setPen(pen)
            axis.setTextPen(pen)
        self.plot.showGrid(x=True, y=True, alpha=0.15)


def prepare_charts(window: QWidget) -> None:
    """Make the plots of `window`'s charts now, one per turn of the event loop, so that none is made while a job
    reports progress; stops by itself if the window goes."""

    def next_chart() -> None:
        # Looked up again each turn: pages delete and make charts (a method's parameter editors) in between.
        chart = next((c for c in window.findChildren(ChartHost) if c.plot is None), None)
        if chart is not None:
            chart.ensure_plot()
            QTimer.singleShot(0, window, next_chart)

    QTimer.singleShot(0, window, next_chart)
