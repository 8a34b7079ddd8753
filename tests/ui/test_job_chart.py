"""The Jobs page's chart: throughput over time from a real job's progress events, and the estimate against the
actual time once the job is done."""

from __future__ import annotations

import pytest

from guiapp.system.probe import cache_file, machine_fingerprint, store
from guiapp.ui.theme import apply_scheme
from tests.ui.conftest import wait_for_job


def _run_medium_extraction(qtbot, window, models, output, probed):
    # A machine probed before (its speeds are on disk): the job estimates its time as it starts.
    store(probed, cache_file(machine_fingerprint()))
    window.show_page("lora")
    page = window.lora
    page.extract.base.set_text(str(models.medium_base))
    page.extract.model.set_text(str(models.medium_a))
    page.extract.rank_value.setValue(8)
    page.extract.out.setText(str(output))
    qtbot.waitUntil(page.extract.bar.button.isEnabled, timeout=30_000)
    seen = []
    window.state.jobs.progress.connect(lambda key, event: seen.append(key))
    key = page.extract.run()
    return wait_for_job(qtbot, window, key, timeout=120_000), seen


def test_a_jobs_throughput_is_charted_and_its_estimate_set_against_the_time_it_took(qtbot, window, models, tmp_path, probed):
    record, seen = _run_medium_extraction(qtbot, window, models, tmp_path / "adapter", probed)
    assert record.status == "done", record.log
    chart = window.jobs.job_chart
    assert seen and chart.points[record.key]  # points from the real job's progress events
    assert all(rate > 0 for _, rate in chart.points[record.key])
    seconds = [t for t, _ in chart.points[record.key]]
    assert seconds == sorted(seconds)
    window.jobs.select(record.key)
    assert chart.chart.isVisible() and chart.chart.points == chart.points[record.key]
    estimate = record.summary["estimate"]
    assert estimate["low"] <= estimate["seconds"] <= estimate["high"]
    assert chart.chart.estimate == estimate and chart.chart.actual == pytest.approx(record.finished - record.started)
    assert chart.verdict.isVisible() and chart.verdict.text().startswith(("Estimated about ", "Estimated under a second"))
    assert "took" in chart.verdict.text()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshot(qtbot, window, models, tmp_path, probed, scheme, chart_shots):
    apply_scheme(scheme)
    try:
        record, _ = _run_medium_extraction(qtbot, window, models, tmp_path / "adapter", probed)
        window.jobs.select(record.key)
        chart = window.jobs.job_chart
        qtbot.waitUntil(lambda: chart.chart.plot is not None, timeout=10_000)
        assert chart.grab().save(str(chart_shots / f"job-chart-{scheme}.png"))
    finally:
        apply_scheme("light")


def test_the_charts_plots_are_made_while_the_window_is_idle_not_while_a_job_reports(qtbot, window, models, tmp_path,
                                                                                    probed):
    from guiapp.ui.widgets.charts import ChartHost

    # Making a plot froze the window for 0.2 s when a job's first progress arrived: every chart the
    # window has gets its plot once the chart library has loaded, before any job.
    charts = window.findChildren(ChartHost)
    assert {type(c).__name__ for c in charts} >= {"ThroughputChart", "ModuleEnergyChart", "SpectrumChart"}
    qtbot.waitUntil(lambda: all(c.plot is not None for c in window.findChildren(ChartHost)), timeout=10_000)
    plots = {id(c): c.plot for c in window.findChildren(ChartHost)}
    window.show_page("jobs")
    record, seen = _run_medium_extraction(qtbot, window, models, tmp_path / "adapter", probed)
    assert record.status == "done" and seen
    assert all(plots.get(id(c)) is c.plot for c in window.findChildren(ChartHost) if id(c) in plots)


def test_a_hidden_chart_draws_its_data_when_it_is_next_shown(qtbot):
    from guiapp.ui.widgets.job_chart import ThroughputChart

    chart = ThroughputChart()
    qtbot.addWidget(chart)
    chart.ensure_plot()  # as the window prepares it, hidden
    drawn = []
    chart.redraw = lambda: drawn.append(list(chart.points))
    for n in range(1, 6):
        chart.show_job([(float(t), 10.0) for t in range(n)], None, None)
    assert drawn == []  # five changes while hidden draw nothing
    chart.show()
    qtbot.waitUntil(chart.isVisible)
    assert len(drawn) == 1 and len(drawn[0]) == 5  # the last data, once
    chart.show_job([(0.0, 1.0)], None, None)
    assert drawn[-1] == [(0.0, 1.0)]  # on screen: at once


def test_a_running_jobs_axes_change_in_round_steps_and_an_ended_jobs_fit_its_data(qtbot):
    from guiapp.ui.widgets.job_chart import ThroughputChart

    chart = ThroughputChart()
    qtbot.addWidget(chart)
    chart.show()
    chart.ensure_plot()
    ranges = []
    points = []
    for step in range(1, 301):  # a one-minute job reporting five times a second, at 100–130 MB/s
        points.append((step / 5, 100.0 + 30.0 * (step % 7) / 6))
        chart.show_job(points, None, None)
        ranges.append(tuple(map(tuple, chart.plot.viewRange())))
    # Laying the axes out again on every event cost the window about 25 ms each time: a round step now and then
    # (about ten per tenfold growth) instead.
    assert len(set(ranges)) <= 30, len(set(ranges))
    (_, right), (_, top) = ranges[-1]
    assert right >= 60 and top >= 130  # every point in view
    chart.show_job(points, {"seconds": 50.0, "low": 40.0, "high": 70.0}, 60.0)
    (_, right), (_, top) = chart.plot.viewRange()
    # Ended: the ranges fit the data and the shaded estimate, "about 1–2 min" (a round step up could leave half the
    # chart empty).
    assert 120 <= right <= 120 * 1.1 and 130 <= top <= 130 * 1.15, chart.plot.viewRange()


def test_a_running_jobs_events_lay_its_axes_out_only_when_their_ranges_change(qtbot, monkeypatch):
    from guiapp.ui.widgets.charts import pyqtgraph
    from guiapp.ui.widgets.job_chart import ThroughputChart

    # Laying an axis out (its ticks and labels) costs the window 20-35 ms; setting a label again, even to the same
    # text and colour, made every progress event do it for both axes (stalls of 45-67 ms while a merge ran).
    axis_type = pyqtgraph().AxisItem
    layouts = []
    real_layout = axis_type.generateDrawSpecs

    def counted(self, painter):
        layouts.append(self)
        return real_layout(self, painter)

    monkeypatch.setattr(axis_type, "generateDrawSpecs", counted)
    chart = ThroughputChart()
    qtbot.addWidget(chart)
    chart.show()
    chart.ensure_plot()
    points, ranges = [], set()
    for step in range(1, 101):
        points.append((step / 5, 100.0 + 30.0 * (step % 7) / 6))
        chart.show_job(points, None, None)
        chart.plot.grab()  # paints it as the screen would
        ranges.add(tuple(map(tuple, chart.plot.viewRange())))
    assert layouts  # the painting was seen
    assert len(layouts) <= 2 * (len(ranges) + 1), (len(layouts), len(ranges))


def test_a_chart_deleted_while_the_window_prepares_its_charts_is_skipped(qtbot):
    import shiboken6
    from PySide6.QtWidgets import QVBoxLayout, QWidget

    from guiapp.ui.widgets.charts import prepare_charts
    from guiapp.ui.widgets.job_chart import ThroughputChart

    window = QWidget()
    qtbot.addWidget(window)
    column = QVBoxLayout(window)
    charts = [ThroughputChart() for _ in range(3)]
    for chart in charts:
        column.addWidget(chart)
    prepare_charts(window)
    shiboken6.delete(charts[1])  # a page drops one of its charts before its turn comes
    qtbot.waitUntil(lambda: charts[0].plot is not None and charts[2].plot is not None, timeout=5_000)


@pytest.mark.parametrize(("actual", "words"), [
    (1.4, "within the estimate"), (1.0, "within the estimate"), (1.8, "within the estimate"),
    (0.73, "a little faster than estimated"), (0.6, "faster than estimated"),
    (2.2, "a little slower than estimated"), (3.2, "slower than estimated"),
])
def test_the_verdict_says_what_the_chart_shows(actual, words):
    # The dashed line of a 0.73 s job to the left of the shaded "about 1–2 s" was called "close to the estimate".
    from guiapp.ui.widgets.job_chart import _verdict

    text = _verdict({"seconds": 1.4, "low": 1.0, "high": 1.8}, actual)
    assert text.endswith(f"(dashed line), {words}.")


def _pixels_of(image, colour: str) -> int:
    from PySide6.QtGui import QColor

    wanted = QColor(colour).rgb()
    return sum(image.pixel(x, y) == wanted for x in range(image.width()) for y in range(image.height()))


def test_a_job_too_short_for_two_progress_points_still_shows_its_throughput(qtbot):
    from guiapp.ui.widgets.job_chart import ThroughputChart

    chart = ThroughputChart()
    qtbot.addWidget(chart)
    chart.resize(400, 150)
    chart.show()
    chart.ensure_plot()
    # A job of a third of a second reported its rate once before it ended.
    chart.show_job([(0.25, 120.0)], {"seconds": 1.0, "low": 0.8, "high": 1.25}, 0.33)
    assert _pixels_of(chart.grab().toImage(), chart.series_colour(0)) > 20
