"""The LoRA rank as a picture: the preview of what each rank keeps (computed from the real tensors in the
background), a click on the curve choosing the rank, and the report's chart per module after extracting."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, Qt

from guiapp.jobs.extraction_words import short_module_name
from guiapp.ui.theme import apply_scheme
from tests.ui.conftest import wait_for_job


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`: the LoRA pair empty as in a fresh window) for the previews, which
    run no job; the tests that extract call `make_window`."""
    return shared_window


def _previewed(qtbot, window, models):
    window.show_page("lora")
    page = window.lora
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))  # every matrix changed by a rank-4 update
    preview = page.extract.rank_preview
    qtbot.waitUntil(preview.button.isEnabled, timeout=10_000)
    qtbot.mouseClick(preview.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(preview.chart.spectra) and preview.chart.isVisible(), timeout=60_000)
    qtbot.waitUntil(lambda: preview.chart.plot is not None and preview.chart.plot.viewport().height() > 80,
                    timeout=10_000)
    return page, preview


def test_the_preview_shows_a_planted_rank_and_a_click_on_the_curve_sets_the_rank(qtbot, window, models):
    page, preview = _previewed(qtbot, window, models)
    assert len(preview.chart.spectra) == 3  # a small model: its fewest samples (one matrix in eight, at least 3)
    assert all(s.rank_for(0.9999) == 4 for s in preview.chart.spectra)  # all of the change by rank 4
    assert "Rank 4 keeps 90 %" in preview.status.text() or "Rank 3 keeps 90 %" in preview.status.text()
    page.extract.rank_mode.setCurrentIndex(page.extract.rank_mode.findData("energy"))
    viewport = preview.chart.plot.viewport()
    qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton, pos=preview.chart.to_pixel(6, 0.5).toPoint())
    assert page.extract.rank_mode.currentData() == "fixed" and page.extract.rank_value.value() == 6
    assert preview.chart.rank == 6


def test_other_models_clear_the_preview(qtbot, window, models):
    page, preview = _previewed(qtbot, window, models)
    page.extract.model.set_text(str(models.tune_b))
    assert not preview.chart.isVisible() and preview.chart.spectra == []
    assert preview.button.isEnabled() and preview.status.text() == ""


def test_the_report_charts_each_modules_kept_change_with_the_worst_highlighted(qtbot, make_window, models, tmp_path):
    window = make_window()
    window.show_page("lora")
    page = window.lora
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    page.extract.rank_value.setValue(2)  # below the planted rank 4: some change is lost, unevenly
    page.extract.out.setText(str(tmp_path / "adapter"))
    qtbot.waitUntil(page.extract.bar.button.isEnabled, timeout=20_000)
    assert not page.extract.report_chart.isVisible()
    qtbot.mouseClick(page.extract.bar.button, Qt.MouseButton.LeftButton)
    record = wait_for_job(qtbot, window, window.jobs.selected, timeout=120_000)
    assert record.status == "done", record.log
    window.show_page("lora")
    chart = page.extract.report_chart
    qtbot.waitUntil(chart.isVisible, timeout=10_000)
    energies = {m["module"]: m["retained_energy"] for m in record.summary["module_energies"]}
    assert [m["module"] for m in chart.modules] == list(energies) and len(energies) > 3
    assert sorted(chart.worst, key=energies.get) == sorted(energies, key=energies.get)[:3]
    # One metric, one name, one ranking: the report's text names the chart's highlighted modules, in its order.
    report = page.extract.report.text()
    named = [f"{short_module_name(module)} ({energies[module]:.0%}" for module in chart.worst]
    assert "Keeps the least of its change: " + named[0] in report
    assert [report.index(n) for n in named] == sorted(report.index(n) for n in named)
    assert "error" not in report.lower() and "energy" not in report.lower()
    assert chart.plot.getViewBox().viewRange()[1][0] <= 0.0  # the axis starts at 0 %
    page.extract.model.set_text(str(models.tune_b))  # another pair: the chart about the last one goes
    assert not chart.isVisible()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots(qtbot, window, models, tmp_path, scheme, chart_shots):
    apply_scheme(scheme)
    try:
        page, preview = _previewed(qtbot, window, models)
        preview.chart.show_rank(8)
        assert preview.grab().save(str(chart_shots / f"rank-preview-{scheme}.png"))
        summary = {"module_energies": [{"module": f"model.layers.{i // 7}.{kind}", "rank": 8,
                                        "retained_energy": 0.97 - 0.02 * (i % 7) - (0.2 if i == 9 else 0)}
                                       for i, kind in enumerate(["self_attn.q_proj", "self_attn.k_proj",
                                                                 "self_attn.v_proj", "self_attn.o_proj",
                                                                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"] * 2)]}
        page.extract.report_chart.show_summary(summary)
        qtbot.waitUntil(lambda: page.extract.report_chart.plot is not None, timeout=10_000)
        assert page.extract.report_chart.grab().save(str(chart_shots / f"module-energy-{scheme}.png"))
    finally:
        apply_scheme("light")


def test_the_jobs_page_shows_an_extractions_chart_per_module(qtbot, make_window, models, tmp_path, chart_shots):
    window = make_window()
    window.show_page("lora")
    page = window.lora
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    page.extract.out.setText(str(tmp_path / "adapter"))
    qtbot.waitUntil(page.extract.bar.button.isEnabled, timeout=20_000)
    record = wait_for_job(qtbot, window, page.extract.run(), timeout=120_000)
    assert record.status == "done", record.log
    window.show_page("jobs")
    window.jobs.select(record.key)
    chart = window.jobs.energy_chart
    qtbot.waitUntil(chart.isVisible, timeout=10_000)
    assert [m["module"] for m in chart.modules] == [m["module"] for m in record.summary["module_energies"]]
    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.height() == 700, timeout=5_000)
    assert window.jobs.log.height() >= 60  # the log keeps room under the charts at the smallest size
    assert window.grab().save(str(chart_shots / "jobs-page-1024x700.png"))


def test_the_names_of_neighbouring_worst_modules_do_not_cover_each_other(qtbot):
    import pyqtgraph as pg

    from guiapp.ui.widgets.spectrum_chart import ModuleEnergyChart

    chart = ModuleEnergyChart()
    qtbot.addWidget(chart)
    chart.resize(620, 190)
    kinds = ["self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj", "mlp.up_proj", "self_attn.v_proj",
             "self_attn.o_proj", "mlp.gate_proj"]
    worst = {0: 0.28, 2: 0.29, 3: 0.3}  # as the screenshots' extraction: three low bars side by side
    chart.show_summary({"module_energies": [
        {"module": f"model.layers.{i // 7}.{kind}", "rank": 8, "retained_energy": worst.get(i, 0.5)}
        for i, kind in enumerate(kinds * 2)]})
    chart.show()
    qtbot.waitUntil(lambda: chart.plot is not None and chart.plot.viewport().width() > 300, timeout=10_000)
    chart.redraw()

    def label_rects():
        return [item.sceneBoundingRect() for item in chart.plot.items() if isinstance(item, pg.TextItem)]

    qtbot.waitUntil(lambda: len(label_rects()) == 3 and all(0 <= r.left() and r.right() <= chart.width()
                                                            for r in label_rects()), timeout=10_000)
    rects = label_rects()
    assert not any(a.intersects(b) for n, a in enumerate(rects) for b in rects[n + 1:]), rects
    full = chart.plot.getViewBox().mapViewToScene(QPointF(0, 1.0)).y()  # the 100 % line, the bars' highest
    assert all(r.bottom() <= full + 1 for r in rects), (rects, full)  # no name covers a bar
    assert chart.plot.getViewBox().viewRange()[1][0] <= 0.0  # the axis starts at 0 %, not at the lowest bar


def test_the_preview_counts_its_modules_and_stop_frees_the_window_at_once(qtbot, window, models):
    window.show_page("lora")
    page = window.lora
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    preview = page.extract.rank_preview
    qtbot.waitUntil(preview.button.isEnabled, timeout=10_000)
    reached: list[tuple[int, int]] = []
    preview.module_reached.connect(lambda done, total: reached.append((done, total)))
    qtbot.mouseClick(preview.button, Qt.MouseButton.LeftButton)
    assert preview.stop_button.isVisible() and not preview.button.isEnabled()
    assert "Reading the models" in preview.status.text()
    qtbot.mouseClick(preview.stop_button, Qt.MouseButton.LeftButton)
    assert not preview.stop_button.isVisible() and preview.button.isEnabled()
    assert "Stopped" in preview.status.text()
    qtbot.wait(1_000)  # a stopped preview shows nothing afterwards
    assert not preview.chart.isVisible() and "Stopped" in preview.status.text()
    reached.clear()
    qtbot.mouseClick(preview.button, Qt.MouseButton.LeftButton)  # again, to its end: every module counted
    qtbot.waitUntil(lambda: bool(preview.chart.spectra), timeout=60_000)
    assert reached[-1] == (3, 3) and [done for done, _ in reached] == sorted(done for done, _ in reached)
    assert not preview.stop_button.isVisible() and "3 modules sampled" in preview.status.text()
