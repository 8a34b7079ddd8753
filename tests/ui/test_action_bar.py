"""The job pages' action bars: always in sight (also at 1024x700), the primary button disabled with the reason
while the form has an error or is being checked, a one-line summary, and nothing shifting as statuses change."""

from __future__ import annotations

import re

import yaml
from PySide6.QtCore import QPoint, QRect, Qt

from tests.ui.conftest import wait_for_job


def _recipe(models, second):
    return {"merge_method": "linear", "models": [{"model": str(models.tune_a), "parameters": {"weight": 0.5}},
                                                 {"model": str(second), "parameters": {"weight": 0.5}}]}


def _inside_window(window, widget) -> bool:
    """Whether all of `widget` is shown inside the window's visible area (not scrolled away, not clipped)."""
    top_left = widget.mapTo(window, QPoint(0, 0))
    return (widget.isVisible() and not widget.visibleRegion().isEmpty()
            and window.rect().contains(QRect(top_left, widget.size())))


def test_run_is_in_sight_at_the_smallest_size_and_disabled_with_the_reason_until_the_recipe_is_fixed(
        qtbot, window, models, tmp_path):
    window.show_page("merge")
    window.resize(1024, 700)  # the width stops at the widest page's minimum (the Models page's, today 1096 px)
    qtbot.waitUntil(lambda: window.height() == 700 and window.width() == max(1024, window.minimumWidth()),
                    timeout=5_000)
    page = window.merge
    button, status = page.run_box.action_bar.button, page.run_box.action_bar.status
    assert _inside_window(window, button)
    page.output_edit.setText(str(tmp_path / "merged"))
    page.yaml_edit.setPlainText(yaml.safe_dump(_recipe(models, models.wider)))  # shapes differ: cannot merge
    qtbot.waitUntil(lambda: status.text().startswith("Fix: "), timeout=20_000)
    assert not button.isEnabled() and status.property("status") == "problem"
    assert "mlp" in status.text()  # the first problem itself, not "see above"
    assert _inside_window(window, button)  # a long problem does not push the button out of sight
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert not window.state.jobs.records  # a disabled Run starts nothing
    page.yaml_edit.setPlainText(yaml.safe_dump(_recipe(models, models.tune_b)))
    qtbot.waitUntil(button.isEnabled, timeout=20_000)
    assert status.text() == "Ready."
    summary = page.run_box.action_bar.summary.text()
    # the time as a range, or in words below a second (which one depends on this machine's speed)
    assert re.fullmatch(r"Linear \(weighted average\) · 2 models · into merged · (about \S+ \w+|under a second)",
                        summary), summary
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert wait_for_job(qtbot, window, window.jobs.selected).status == "done"


def test_the_button_does_not_move_as_the_status_changes(qtbot, window, models):
    page = window.merge
    window.show_page("merge")
    bar = page.run_box.action_bar
    geometries = set()
    for show in (bar.set_checking, lambda: bar.set_blocked("a problem " * 40), bar.set_ready,
                 lambda: bar.set_waiting("")):
        show()
        qtbot.wait(0)
        bar.layout().activate()
        geometries.add((bar.button.geometry().getRect(), bar.geometry().height()))
    assert len(geometries) == 1, geometries
    bar.set_blocked("a problem " * 40)
    assert bar.status.toolTip().startswith("Fix: a problem")  # the whole reason, when it does not fit


def test_one_model_is_one_model(qtbot, window, models):
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "linear", "models": [
        {"model": str(models.tune_a), "parameters": {"weight": 1.0}}]}))
    qtbot.waitUntil(lambda: "1 model ·" in page.run_box.action_bar.summary.text(), timeout=20_000)


def test_the_lora_tabs_run_from_their_bars_and_a_new_pair_clears_the_last_report(qtbot, window, models, tmp_path):
    window.show_page("lora")
    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.height() == 700, timeout=5_000)
    page = window.lora
    bar = page.extract.bar
    assert not bar.button.isEnabled() and bar.status.text() == "Choose the base model and the fine-tuned model first."
    assert _inside_window(window, bar.button)
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    page.extract.out.setText(str(tmp_path / "tune-a-lora"))
    qtbot.waitUntil(bar.button.isEnabled, timeout=20_000)
    assert bar.summary.text().startswith("Rank 32 · from tune-a · into tune-a-lora"), bar.summary.text()
    qtbot.mouseClick(bar.button, Qt.MouseButton.LeftButton)
    assert wait_for_job(qtbot, window, window.jobs.selected, timeout=120_000).status == "done"
    assert "Adapter:" in page.extract.report.text()
    page.extract.model.set_text(str(models.tune_b))  # another pair: the report about the last one goes
    assert page.extract.report.text() == ""
    window.show_page("lora")  # running took the window to the Jobs page
    page.tabs.setCurrentIndex(1)
    assert _inside_window(window, page.apply.bar.button) and not page.apply.bar.button.isEnabled()


def test_a_long_problem_shows_its_beginning_and_the_whole_of_it_on_hover(qtbot):
    from guiapp.ui.widgets.action_bar import ActionBar

    bar = ActionBar("Run merge")
    qtbot.addWidget(bar)
    bar.resize(700, bar.sizeHint().height())
    bar.show()
    problem = "/home/someone/Mergesmith/merged already exists (an earlier Mergesmith merge output). " + "x" * 300
    bar.set_blocked(problem, fix="Use a new name: merged-2")
    shown = super(type(bar.status), bar.status).text()  # what the label draws
    assert shown.startswith("Fix: /home/someone/Mergesmith/merged already exists") and shown.endswith("…")
    assert bar.status.toolTip() == "Fix: " + problem
