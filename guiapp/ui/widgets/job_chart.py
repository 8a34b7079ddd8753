"""A job's throughput over time (MB/s from the progress events the job bridge receives) and, once it has ended,
its time estimate against the actual time: the estimated range is shaded on the same time axis, so one look says
whether the job ran as expected.

Points are collected for every job of the session as its events arrive, so selecting a running job shows its
whole history; the chart shows the job the Jobs page selects (`show_record`).
"""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QVBoxLayout, QWidget

from guiapp.jobs.runner import JobStatus
from guiapp.system.units import format_seconds, roughly
from guiapp.ui.widgets.charts import ChartHost, pyqtgraph
from guiapp.ui.widgets.wrapping_label import WrappingLabel

CHART_HEIGHT = 150
MAX_POINTS = 600  # per job; older points are thinned out beyond this
MAX_JOBS = 20  # jobs whose points are kept
NEAR_RATIO = 1.5  # an actual time within 1/1.5 of the estimate's low end and 1.5 times its high end is near it


class ThroughputChart(ChartHost):
    """MB/s against seconds since the job started, with the estimate's range shaded once the job is done."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(CHART_HEIGHT, parent, shrinks=True)  # on the Jobs page, which has no scroll bar
        self.setAccessibleName("Throughput over time")
        self.points: list[tuple[float, float]] = []  # (seconds since start, MB/s)
        self.estimate: dict[str, Any] | None = None
        self.actual: float | None = None

    def show_job(self, points: list[tuple[float, float]], estimate: dict[str, Any] | None,
                 actual: float | None) -> None:
        self.points, self.estimate, self.actual = list(points), estimate, actual
        self.refresh()

    def configure(self) -> None:
        self.plot.setLabel("bottom", "seconds")
        self.plot.setLabel("left", "MB/s")
        # One curve whose data is replaced as points arrive (making items anew for each point cost more than
        # drawing them); the estimate's marks are made once the job has ended.
        self.curve = self.plot.plot([], [], fillLevel=0)
        self.marks: list[Any] = []
        self._label_colour: str | None = None

    def redraw(self) -> None:
        pg = pyqtgraph()
        for mark in self.marks:
            self.plot.removeItem(mark)
        self.marks = []
        if self._label_colour != self.text_colour():  # a label set again lays its axis out again: ~25 ms
            self._label_colour = self.text_colour()
            for axis in ("left", "bottom"):
                self.plot.getAxis(axis).setLabel(self.plot.getAxis(axis).labelText, color=self._label_colour)
        right = max([p[0] for p in self.points] + [self.actual or 0.0, 1.0])
        if self.estimate is not None and self.actual is not None:
            low, high = _shaded_range(self.estimate)
            colour = pg.mkColor(self.series_colour(2))
            colour.setAlpha(60)
            self.marks = [pg.LinearRegionItem((low, high), movable=False, brush=pg.mkBrush(colour),
                                              pen=pg.mkPen(self.series_colour(2), width=1)),
                          pg.InfiniteLine(self.actual, angle=90, pen=pg.mkPen(self.text_colour(), width=1.5,
                                                                              style=Qt.PenStyle.DashLine))]
            for mark in self.marks:
                self.plot.addItem(mark)
            right = max(right, high)
        self.curve.setPen(pg.mkPen(self.series_colour(0), width=2))
        self.curve.setBrush(pg.mkBrush(self._fill_colour()))
        # A job shorter than two progress reports has one point, which a line cannot draw: it is shown as a dot.
        lone = len(self.points) == 1
        if lone:
            self.curve.setSymbolSize(8)
            self.curve.setSymbolPen(pg.mkPen(self.series_colour(0)))
            self.curve.setSymbolBrush(pg.mkBrush(self.series_colour(0)))
        if lone != (self.curve.opts["symbol"] is not None):  # setting it lays the curve out again
            self.curve.setSymbol("o" if lone else None)
        self.curve.setData([p[0] for p in self.points], [p[1] for p in self.points])
        top = max([p[1] for p in self.points] + [1.0])
        # While a job runs, its ranges grow in round steps, so that most progress events move the curve only
        # (laying the axes out again on every event cost about 25 ms of the window's time); an ended job's fit it.
        fit = round_up if self.actual is None else float
        self.plot.setXRange(0, fit(right), padding=0.03)
        self.plot.setYRange(0, fit(top), padding=0.08)

    def _fill_colour(self) -> Any:
        colour = pyqtgraph().mkColor(self.series_colour(0))
        colour.setAlpha(50)
        return colour


class JobChart(QWidget):
    """The throughput chart with a line under it: the estimate against the actual time once a job has ended.
    Collects points from `bridge.progress` (guiapp.ui.job_bridge.JobBridge) for every job."""

    def __init__(self, bridge: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.points: dict[str, list[tuple[float, float]]] = {}
        self.key: str | None = None
        self.chart = ThroughputChart()
        self.verdict = WrappingLabel()
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.chart)
        column.addWidget(self.verdict)
        bridge.progress.connect(self._progress)
        self.show_record(None)

    def show_record(self, record: Any) -> None:
        """Show `record`'s throughput and, if it has ended, its estimate against the time it took (hidden when
        there is neither)."""
        self.key = record.key if record is not None else None
        points = self.points.get(self.key, []) if self.key else []
        estimate = (record.summary or {}).get("estimate") if record is not None else None
        actual = _actual_seconds(record) if record is not None and record.status == JobStatus.DONE else None
        self.chart.show_job(points, estimate, actual)
        self.chart.setVisible(bool(points) or (estimate is not None and actual is not None))
        self.verdict.setText(_verdict(estimate, actual))
        self.verdict.setVisible(bool(self.verdict.text()))

    def _progress(self, key: str, event: Any) -> None:
        # The recent rate once measured; before that, the average so far.
        rate = event.rate or (event.bytes_done / event.elapsed if event.elapsed > 0 else 0.0)
        points = self.points.setdefault(key, [])
        if not rate or (points and event.elapsed <= points[-1][0]):
            return  # nothing moved yet, or the same moment again: the line only moves forward
        points.append((event.elapsed, rate / 1e6))
        if len(points) > MAX_POINTS:
            del points[1::2]  # every other point: the shape stays, the count halves
        for old in list(self.points)[:-MAX_JOBS]:
            del self.points[old]
        if key == self.key:
            self.chart.setVisible(True)
            self.chart.show_job(points, None, None)


def round_up(value: float) -> float:
    """The smallest round number at least `value` (> 0): 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10… times a power of
    ten, so that an axis never shows more than a quarter of itself empty."""
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in _ROUND_STEPS if step * power >= value * (1 - 1e-9))


_ROUND_STEPS = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)


def _estimate_range(estimate: dict[str, Any]) -> tuple[float, float]:
    """The estimate's own low and high ends, in seconds."""
    seconds = float(estimate["seconds"])
    low = estimate.get("low")
    high = estimate.get("high")
    return (float(low) if low is not None else seconds), (float(high) if high is not None else seconds)


def _shaded_range(estimate: dict[str, Any]) -> tuple[float, float]:
    """The range the verdict states ("about 10–20 s": 10 to 20 s), which the chart shades and the actual time is
    judged against, so the picture and the words agree."""
    from guiapp.system.units import duration_range_bounds

    bottom, top, _ = duration_range_bounds(*_estimate_range(estimate))
    return bottom, top


def _actual_seconds(record: Any) -> float | None:
    if record.started is None or record.finished is None:
        return None
    return max(0.0, record.finished - record.started)


def _verdict(estimate: dict[str, Any] | None, actual: float | None) -> str:
    """"Estimated about 1–2 min (shaded); took 1 min 20 s (dashed line), within the estimate." and the like;
    "" when either is unknown. The words follow the picture: within the shaded range, a little faster or slower
    than it (up to 1.5 times outside it, the goal estimates are held to), or faster or slower than estimated."""
    if estimate is None or actual is None:
        return ""
    low, high = _shaded_range(estimate)
    if actual > NEAR_RATIO * high:
        how = "slower than estimated"
    elif actual > high:
        how = "a little slower than estimated"
    elif actual < low / NEAR_RATIO:
        how = "faster than estimated"
    elif actual < low:
        how = "a little faster than estimated"
    else:
        how = "within the estimate"
    return (f"Estimated {roughly(*_estimate_range(estimate))} (shaded); took {format_seconds(actual)} "
            f"(dashed line), {how}.")
