"""No internal value reaches the window: no "None", "nan", unformatted "{…}" or Python repr in any text shown
after a set of real flows (a sample merge, a Try and a Perplexity job over several models, a cancelled merge seen
again after a restart, a failed one), and what the Jobs page says of a finished job matches what it shows."""

from __future__ import annotations

import re

import pytest
import yaml
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QComboBox,
    QLabel,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QProgressBar,
    QTableWidget,
    QTextEdit,
    QWidget,
)

from guiapp.ui.main_window import PAGES
from tests.tryout.models import write_causal
from tests.ui.conftest import wait_for_job

pytest.importorskip("transformers")

LEAKS = re.compile(r"\bNone\b|\bnan\b|\bNaN\b|\{[^{}\n]*\}|<[\w.]+ object at 0x|\b[A-Z]\w*\(\w+=")


@pytest.fixture(scope="module")
def causal_models(tmp_path_factory):
    import torch

    root = tmp_path_factory.mktemp("leaks")
    return [write_causal(root / f"causal-{n}", torch.float32, seed=n) for n in range(3)]


def _texts(widget: QWidget) -> list[str]:
    """Everything `widget` shows as text (the recipe's own YAML view excepted: that is the recipe's syntax)."""
    if isinstance(widget, QLabel | QAbstractButton | QLineEdit):
        return [widget.text(), widget.toolTip()]
    if isinstance(widget, QPlainTextEdit | QTextEdit):
        return [widget.toPlainText()]
    if isinstance(widget, QProgressBar):
        return [widget.text()]
    if isinstance(widget, QComboBox):
        return [widget.itemText(i) for i in range(widget.count())]
    if isinstance(widget, QListWidget):
        return [widget.item(i).text() for i in range(widget.count())]
    if isinstance(widget, QTableWidget):
        return [widget.item(r, c).text() for r in range(widget.rowCount()) for c in range(widget.columnCount())
                if widget.item(r, c) is not None]
    return []


def assert_no_leaks(window) -> None:
    """Show every page in turn and read every visible widget's text; each job is selected on the Jobs page."""
    leaks = []

    def walk(where: str) -> None:
        for widget in window.findChildren(QWidget):
            if not widget.isVisible() or widget is window.merge.yaml_edit:
                continue
            leaks.extend(f"{where}: {type(widget).__name__} {text!r}" for text in _texts(widget)
                         if text and LEAKS.search(text))

    for key, _ in PAGES:
        window.show_page(key)
        walk(key)
    window.show_page("jobs")
    for record in list(window.state.jobs.records):
        window.jobs.select(record.key)
        walk(f"jobs/{record.title}")
    assert not leaks, "\n".join(leaks)


@pytest.mark.long
def test_no_window_text_holds_an_internal_value_after_a_day_of_jobs(qtbot, make_window, models, causal_models,
                                                                      tmp_path, monkeypatch):
    from guiapp.progress import PausePoint

    window = make_window()
    window.welcome.try_samples(tmp_path / "samples")
    qtbot.waitUntil(lambda: window.current_page() == "merge", timeout=60_000)
    qtbot.waitUntil(window.merge.run_button.isEnabled, timeout=30_000)
    qtbot.mouseClick(window.merge.run_button, Qt.MouseButton.LeftButton)
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"

    stages: list[str] = []
    window.state.jobs.progress.connect(lambda *_: stages.append(window.jobs.stage.text()))
    page = window.try_page
    window.show_page("try")
    page.set_models([str(m) for m in causal_models])
    page.prompt.setPlainText("the cat sat on the")
    page.max_new_tokens.setValue(64)
    qtbot.mouseClick(page.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    generated = window.state.jobs.records[-1]
    window.jobs.select(generated.key)
    assert window.jobs.stage.text() == "Finished" and window.jobs.bar.value() == 1000
    assert generated.log[-1].startswith("Finished in") and "result is in" not in generated.log[-1]

    page.tabs.setCurrentIndex(1)
    page.text.setPlainText("the cat sat on the mat. the dog sat on the rug.")
    stages.clear()
    qtbot.mouseClick(page.perplexity_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    scoring = [stage for stage in stages if stage.startswith("Perplexity")]
    assert scoring and all(re.search(r"model [123] of 3", stage) for stage in scoring), scoring
    assert not any(stage.endswith("(1 of 1)") for stage in stages), stages

    monkeypatch.setattr(window.state.jobs.runner, "pause_at", PausePoint("Merging", 25, str(tmp_path / "never-released")))
    window.merge.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "linear", "models": [
        {"model": str(models.medium_a), "parameters": {"weight": 0.5}},
        {"model": str(models.medium_b), "parameters": {"weight": 0.5}}]}))
    window.merge.output_edit.setText(str(tmp_path / "stopped"))
    stopped = window.state.jobs.record(window.merge.run())
    qtbot.waitUntil(lambda: any(line.startswith("Paused after step 25") for line in stopped.log), timeout=60_000)
    qtbot.mouseClick(window.jobs.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: stopped.status == "cancelled", timeout=60_000)
    window.state.jobs.runner.pause_at = None
    stopped_at = window.jobs.bar.text()
    assert re.fullmatch(r"Cancelled at [1-9]\d?%", stopped_at), stopped_at
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    window.merge.output_edit.setText(str(tmp_path / "taken"))
    assert wait_for_job(qtbot, window, window.merge.run()).status == "failed"
    assert_no_leaks(window)

    window.close()  # a restart: the history is read back
    again = make_window()
    again.show_page("jobs")
    again.jobs.select(stopped.key)
    assert again.jobs.bar.text() == stopped_at
    assert_no_leaks(again)


def test_the_estimate_shaded_is_the_estimate_said(qtbot):
    from guiapp.ui.widgets.job_chart import ThroughputChart, _verdict

    chart = ThroughputChart()
    qtbot.addWidget(chart)
    chart.resize(400, 150)
    chart.show()
    chart.ensure_plot()
    estimate = {"seconds": 15.0, "low": 12.3, "high": 17.8}
    chart.show_job([(1.0, 5.0), (14.0, 5.0)], estimate, 15.0)
    assert _verdict(estimate, 15.0).startswith("Estimated about 10–20 s (shaded)")
    region = next(mark for mark in chart.marks if hasattr(mark, "getRegion"))
    assert tuple(round(end, 3) for end in region.getRegion()) == (10.0, 20.0)
    # A sub-second sample merge estimated at 0.8–1.25 s: "about 1 s", as the job's own log says, shaded around 1 s.
    estimate = {"seconds": 1.0, "low": 0.8, "high": 1.25}
    chart.show_job([(0.25, 1.0)], estimate, 0.36)
    assert _verdict(estimate, 0.36).startswith("Estimated about 1 s (shaded)")
    region = next(mark for mark in chart.marks if hasattr(mark, "getRegion"))
    low, high = region.getRegion()
    assert low <= 1.0 <= high < 2.0
