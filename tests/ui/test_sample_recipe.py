"""The sample recipe never replaces earlier work on its own: a second sample run writes beside the first one's
output, Replace stays the user's own choice, and a recipe the user edited comes back with Edit › Undo."""

from __future__ import annotations

import yaml
from PySide6.QtCore import QPoint, Qt

from tests.ui.conftest import wait_for_job


def _click_sample(qtbot, window) -> None:
    window.show_page("welcome")
    button = window.welcome.try_button
    qtbot.waitUntil(button.isEnabled, timeout=10_000)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.current_page() == "merge", timeout=60_000)


def _run_to_the_end(qtbot, window):
    page = window.merge
    qtbot.waitUntil(page.run_button.isEnabled, timeout=30_000)
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    return wait_for_job(qtbot, window, window.jobs.selected)


def test_a_second_sample_run_writes_beside_the_first_without_replacing_it(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the button writes under the home folder
    page = window.merge
    _click_sample(qtbot, window)
    assert not page.overwrite_check.isChecked()
    first = _run_to_the_end(qtbot, window)
    assert first.status == "done"
    first_output = first.output
    marker = (tmp_path / "home").rglob("config.json")
    assert any(str(p).startswith(first_output) for p in marker)

    _click_sample(qtbot, window)
    assert not page.overwrite_check.isChecked()
    assert page.output_edit.text() == first_output + "-2"
    second = _run_to_the_end(qtbot, window)
    assert second.status == "done" and second.output == first_output + "-2"
    assert not any("replac" in line.lower() for line in second.log), second.log


def test_the_sample_button_keeps_an_edited_recipe_within_undo(qtbot, window, tmp_path, monkeypatch, models):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    page = window.merge
    window.show_page("merge")
    edited = {"merge_method": "della", "base_model": str(models.base),
              "models": [{"model": str(models.tune_a), "parameters": {"weight": 0.5, "density": 0.5,
                                                                      "epsilon": 0.1}},
                         {"model": str(models.tune_b), "parameters": {"weight": 0.5, "density": 0.5,
                                                                      "epsilon": 0.1}}],
              "parameters": {"lambda": 50.0}}
    page.yaml_edit.setPlainText(yaml.safe_dump(edited, sort_keys=False))
    page.recipe_panel.flush()
    qtbot.waitUntil(lambda: page.document.get("merge_method") == "della", timeout=10_000)

    _click_sample(qtbot, window)
    assert page.document["merge_method"] == "ties"
    assert "Undo" in window.statusBar().currentMessage()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)
    page.run_button.setFocus()  # outside a text field, Ctrl+Z is the recipe's undo
    qtbot.keyClick(page.run_button, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert page.document["merge_method"] == "della"
    assert page.document["parameters"] == {"lambda": 50.0}
    assert page.document["base_model"] == str(models.base)


def test_replacing_an_earlier_output_is_the_users_click_and_is_logged(qtbot, window, tmp_path):
    page = window.merge
    window.welcome.try_samples(tmp_path / "samples")
    qtbot.waitUntil(lambda: window.current_page() == "merge", timeout=60_000)
    first = _run_to_the_end(qtbot, window)
    window.show_page("merge")
    page.output_edit.setText(first.output)
    bar = page.run_box.action_bar
    qtbot.waitUntil(lambda: bar.status.text().startswith("Fix:"), timeout=20_000)
    box = page.overwrite_check
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))
    assert box.isChecked()
    again = _run_to_the_end(qtbot, window)
    assert again.status == "done"
    assert any(line.startswith("Replaced an earlier Mergesmith merge output") and first.output in line
               for line in again.log), again.log
