"""The Jobs page's chart: throughput over time from a real job's progress events, and the estimate against the
actual time once the job is done."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from guiapp.system.probe import cache_file, machine_fingerprint, store
from guiapp.ui.theme import apply_scheme
from tests.ui.conftest import wait_for_job

SHOTS = Path(os.environ.get("MERGESMITH_CHART_SHOTS") or tempfile.mkdtemp(prefix="charts-"))


def _run_medium_extraction(qtbot, window, models, output, probed):
    # A machine probed before (its speeds are on disk): the job estimates its time as it starts.
    store(probed, cache_file(machine_fingerprint()))
    window.show_page("lora")
    page = window.lora
    page.x_base.set_text(str(models.medium_base))
    page.x_model.set_text(str(models.medium_a))
    page.rank_value.setValue(8)
    page.x_out.setText(str(output))
    qtbot.waitUntil(page.x_bar.button.isEnabled, timeout=30_000)
    seen = []
    window.state.jobs.progress.connect(lambda key, event: seen.append(key))
    key = page.run_extract()
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
def test_screenshot(qtbot, window, models, tmp_path, probed, scheme):
    apply_scheme(scheme)
    try:
        record, _ = _run_medium_extraction(qtbot, window, models, tmp_path / "adapter", probed)
        window.jobs.select(record.key)
        chart = window.jobs.job_chart
        qtbot.waitUntil(lambda: chart.chart.plot is not None, timeout=10_000)
        assert chart.grab().save(str(SHOTS / f"job-chart-{scheme}.png"))
    finally:
        apply_scheme("light")
