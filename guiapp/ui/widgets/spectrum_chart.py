"""What a LoRA rank buys, as pictures: before extracting, the share of a fine-tune's change a rank keeps for a
sample of modules (click the curve to choose that rank); after extracting, each module's retained energy with
the worst ones highlighted.

The preview reads real tensors and decomposes them (`guiapp.jobs.rank_preview.sample_ranks`) on a worker thread
through `run_blocking`; only the newest request's answer is shown, and choosing other models clears it.
"""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from guiapp.jobs.extraction_words import least_kept, short_module_name
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.text import error_text
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.charts import ChartHost, pyqtgraph
from guiapp.ui.widgets.wrapping_label import WrappingLabel

CHART_HEIGHT = 190
AXIS_PIXELS = 45  # the left axis of the report chart, outside the bars
MOST_HEADROOM = 0.45  # of the report chart's height, for the names of the modules that keep least


class SpectrumChart(ChartHost):
    """Retained energy against rank, one thin line per sampled module and a thick line for their average; a
    click chooses the rank under the pointer (`rank_clicked`)."""

    rank_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(CHART_HEIGHT, parent)
        self.setAccessibleName("Share of the change kept, by rank")
        self.setToolTip("Each thin line is one module, the thick line their average. Click to choose that rank.")
        self.spectra: list[Any] = []  # the ModuleSpectrum of each sampled module (guiapp.jobs.rank_preview)
        self.rank: int | None = None

    def show_spectra(self, spectra: list[Any]) -> None:
        self.spectra = list(spectra)
        self.refresh()

    def show_rank(self, rank: int | None) -> None:
        """Mark `rank` on the curves (None: no mark)."""
        self.rank = rank
        self.refresh()

    @property
    def max_rank(self) -> int:
        return max((len(s.retained) for s in self.spectra), default=1)

    def average_at(self, rank: int) -> float:
        """The sampled modules' average share kept at `rank`."""
        return sum(s.retained_at(rank) for s in self.spectra) / len(self.spectra) if self.spectra else 0.0

    def configure(self) -> None:
        self.plot.viewport().installEventFilter(self)
        self.plot.setLabel("bottom", "rank")
        self.plot.setLabel("left", "change kept")

    def redraw(self) -> None:
        pg = pyqtgraph()
        self.plot.clear()
        for axis in ("left", "bottom"):
            self.plot.getAxis(axis).setLabel(self.plot.getAxis(axis).labelText, color=self.text_colour())
        for index, spectrum in enumerate(self.spectra):
            ranks = list(range(1, len(spectrum.retained) + 1))
            self.plot.plot(ranks, list(spectrum.retained), pen=pg.mkPen(self.series_colour(index + 1), width=1))
        if self.spectra:
            ranks = list(range(1, self.max_rank + 1))
            self.plot.plot(ranks, [self.average_at(r) for r in ranks], pen=pg.mkPen(self.series_colour(0), width=3))
        if self.rank is not None and self.spectra:
            self.plot.addItem(pg.InfiniteLine(self.rank, angle=90, pen=pg.mkPen(self.highlight_colour(), width=1.5,
                                                                                style=Qt.PenStyle.DashLine)))
            label = pg.TextItem(f"rank {self.rank}: {self.average_at(self.rank):.0%} kept",
                                color=self.text_colour(), anchor=(0, 1))
            label.setPos(min(self.rank, self.max_rank), 0.02)
            self.plot.addItem(label)
        self.plot.setXRange(1, max(2, self.max_rank), padding=0.02)
        self.plot.setYRange(-0.04, 1.1, padding=0)  # room above 100 % for its label
        self.plot.getAxis("left").setTicks([[(v / 4, f"{v * 25}%") for v in range(5)]])

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (event.type() == QEvent.Type.MouseButtonPress and event.button() == Qt.MouseButton.LeftButton
                and self.spectra):
            rank = min(max(1, round(self.to_view(event.position()).x())), self.max_rank)
            self.show_rank(rank)
            self.rank_clicked.emit(rank)
            return True
        return False


class RankPreview(QWidget):
    """A button that previews the chosen pair's spectra, Stop while it runs, the chart, and a line saying what is
    shown (while it runs: which of the sample modules it is at). Emits `rank_chosen` when the user clicks a rank on
    the curve."""

    rank_chosen = Signal(int)
    # (modules done, modules in the sample), sent from the worker thread: Qt queues it to the window's thread.
    module_reached = Signal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._pair: tuple[str, str] = ("", "")
        self._stop = threading.Event()
        self._task = LatestTask(0, self)
        self.button = QPushButton("Show what each rank keeps")
        self.button.setToolTip("Reads a few of the models' weight matrices and sketches how much of their change each "
                               "rank keeps (both models must be on this computer)")
        self.button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the preview (the models are not changed)")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setVisible(False)
        self.module_reached.connect(self._show_module)
        self._running = False
        self.status = WrappingLabel()
        self.chart = SpectrumChart()
        self.chart.setVisible(False)
        self.chart.rank_clicked.connect(self.rank_chosen)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.button)
        row.addWidget(self.stop_button)
        row.addWidget(self.status, 1)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addLayout(row)
        column.addWidget(self.chart)
        self.set_pair("", "")

    def set_pair(self, base: str, model: str) -> None:
        """The models the preview is about; a preview of other models is cleared (and a running one stopped)."""
        if (base, model) == self._pair and (base or model):
            return
        self._pair = (base, model)
        self._cancel()
        self._finished()
        self.chart.show_spectra([])
        self.chart.setVisible(False)
        self.status.setText("" if base and model else "Choose both models to preview what each rank keeps.")
        set_status_style(self.status, "muted")

    def show_rank(self, rank: int | None) -> None:
        self.chart.show_rank(rank)

    def start(self) -> None:
        """Compute the preview of the chosen pair in the background."""
        self._cancel()
        base, model = self._pair
        stop = self._stop = threading.Event()
        self._running = True
        self.status.setText("Reading the models…")
        set_status_style(self.status, "muted")
        self.button.setEnabled(False)
        self.stop_button.setVisible(True)
        self._task.request(lambda: self._preview(base, model, stop))

    def stop(self) -> None:
        """Stop the running preview: the window is free at once, the worker at the end of its current module."""
        self._cancel()
        self._finished()
        self.status.setText("Stopped. Show what each rank keeps starts the preview again.")
        set_status_style(self.status, "muted")

    def _show_module(self, done: int, total: int) -> None:
        if self._running:
            self.status.setText(f"Reading and sketching the change of sample module {min(done + 1, total)} of "
                                f"{total}…")

    def _finished(self) -> None:
        self._running = False
        self.button.setEnabled(bool(all(self._pair)))
        self.stop_button.setVisible(False)

    async def _preview(self, base: str, model: str, stop: threading.Event) -> None:
        from guiapp.errors import MergesmithError
        from guiapp.jobs.rank_preview import KEPT_SHARE, sample_ranks

        def reached(done: int, total: int) -> None:
            if not stop.is_set():
                self.module_reached.emit(done, total)

        try:
            sample = await run_blocking(sample_ranks, base, model, stop.is_set, reached)
        except MergesmithError as error:
            self._finished()
            self.status.setText(error_text(error))
            set_status_style(self.status, "problem")
            return
        self._finished()
        self.chart.show_spectra(sample.spectra)
        self.chart.setVisible(True)
        typical = sample.typical_rank
        self.status.setText(f"{len(sample.spectra)} modules sampled across the layers. "
                            + (f"Rank {typical} keeps {KEPT_SHARE * 100:.0f} % of the change for half of them. "
                               if typical else "")
                            + "Click the curve to choose a rank.")
        set_status_style(self.status, None)

    def _cancel(self) -> None:
        self._stop.set()
        self._task.cancel()


class ModuleEnergyChart(ChartHost):
    """After an extraction: each LoRA module's retained energy as a bar, the worst few in the highlight colour."""

    def __init__(self, height: int = CHART_HEIGHT, parent: QWidget | None = None, *, shrinks: bool = False) -> None:
        super().__init__(height, parent, shrinks=shrinks)
        self.setAccessibleName("Change kept by each module")
        self.modules: list[dict[str, Any]] = []
        self.worst: list[str] = []
        self.setVisible(False)  # until an extraction's summary arrives

    def show_summary(self, summary: dict[str, Any] | None) -> None:
        """Show an extraction summary's `module_energies` (hidden when it has none)."""
        self.modules = [m for m in (summary or {}).get("module_energies") or [] if m.get("retained_energy") is not None]
        # The same modules, in the same order, as the report's text names.
        least = least_kept(summary or {})
        self.worst = [m["module"] for m in least]
        self.setToolTip("Share of each module's change the adapter keeps."
                        + (" Least: " + ", ".join(f"{short_module_name(m['module'])} ({m['retained_energy']:.0%})"
                                                  for m in least) if least else ""))
        self.setVisible(bool(self.modules))
        self.refresh()

    def configure(self) -> None:
        self.plot.setLabel("bottom", "change kept by each module, first layer to last")

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self.modules:
            self.refresh()  # which names collide depends on the width

    def redraw(self) -> None:
        pg = pyqtgraph()
        self.plot.clear()
        self.plot.getAxis("bottom").setLabel(self.plot.getAxis("bottom").labelText, color=self.text_colour())
        if not self.modules:
            return
        energies = [m["retained_energy"] for m in self.modules]
        colours = [self.highlight_colour() if m["module"] in self.worst else self.series_colour(0) for m in self.modules]
        self.plot.addItem(pg.BarGraphItem(x=list(range(len(energies))), height=energies, width=0.8, brushes=colours,
                                          pens=[pg.mkPen(None)] * len(energies)))
        worst = [(index, short_module_name(m["module"])) for index, m in enumerate(self.modules)
                 if m["module"] in self.worst]
        bar_pixels = max(1.0, self.width() - AXIS_PIXELS) / len(energies)
        metrics = QFontMetrics(self.font())
        rows = _label_rows([(index, (metrics.horizontalAdvance(name) + 12) / bar_pixels) for index, name in worst])
        # The names stand above the 100 % line, each over its bar, so no name covers a bar; the axis starts at 0
        # and the headroom is as many lines as the names need.
        # The bars' own box (the view without its axes): the names' lines are a share of its height.
        box_pixels = self.plot.getViewBox().height() or 0.6 * self.height()
        line = 1.35 * metrics.height() / max(40.0, box_pixels)
        headroom = line * (max(rows, default=-1) + 1) + 0.04
        # In a chart too short for the names (the Jobs page at its smallest), the report's text above names them.
        named = headroom <= MOST_HEADROOM
        top = 1.0 / (1.0 - headroom) if named else 1.05
        for (index, name), row in zip(worst, rows, strict=True) if named else ():
            # Names near an edge lean inwards, so they are not cut off.
            lean = 0.0 if index < len(energies) / 4 else 1.0 if index >= 3 * len(energies) / 4 else 0.5
            label = pg.TextItem(name, color=self.highlight_colour(), anchor=(lean, 1.0 + 1.1 * row))
            label.setPos(index, 1.0 + 0.02 * top)
            self.plot.addItem(label)
        bottom = min(0.0, min(energies)) - 0.06  # a little below 0 %, so that its tick is drawn
        self.plot.setYRange(bottom, top, padding=0)
        # As many ticks as the box has room for: quarters, else 0 % and 100 %.
        steps = 4 if box_pixels >= 4 * 1.5 * metrics.height() else 1
        self.plot.getAxis("left").setTicks([[(v / steps, f"{v * 100 // steps}%") for v in range(steps + 1)]])
        self.plot.setXRange(-0.5, len(energies) - 0.5, padding=0.01)
        self.plot.getAxis("bottom").setTicks([[]])


def _label_rows(labels: list[tuple[int, float]]) -> list[int]:
    """The line (0: just above the bar) of each (bar index, width in bars) label, left to right: the lowest line
    where it does not cover a label already placed."""
    placed: list[list[tuple[int, float]]] = []
    rows = []
    for index, width in labels:
        row = next((r for r, line in enumerate(placed)
                    if all(abs(index - other) >= (width + other_width) / 2 for other, other_width in line)),
                   len(placed))
        if row == len(placed):
            placed.append([])
        placed[row].append((index, width))
        rows.append(row)
    return rows
