"""Journeys a new user takes, from a fresh profile, counted in user actions: each click, key press or
typed word goes through `Actions`, which performs it with real QTest events and counts it. Waiting for the window
is not an action.

- First merge with the sample models: Try it with sample models → Run merge → the result: 2 actions (at most 4).
- A Hub merge of three models: type "tiny" on the Start page (its search box has the keyboard; the search goes on
  in the Models page) → drag over the three results → Add 3 models to merge (the base of the other two goes in
  as the base) → Run merge → the result: 4 actions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QPushButton, QWidget

from tests.ui.conftest import wait_for_job

JOB_MS = 120_000


class Actions:
    """Performs user actions with real events and counts them."""

    def __init__(self, qtbot) -> None:
        self.qtbot = qtbot
        self.count = 0

    def click(self, widget: QWidget, position: QPoint | None = None,
              modifier: Qt.KeyboardModifier = Qt.KeyboardModifier.NoModifier) -> None:
        assert widget.isVisible() and widget.isEnabled(), widget
        self.count += 1
        self.qtbot.mouseClick(widget, Qt.MouseButton.LeftButton, modifier, position or widget.rect().center())

    def type(self, widget: QWidget, text: str) -> None:
        """Typing one word or name counts as one action. Each key goes where a keyboard's would: to the widget that
        has the focus then (the first key may move it)."""
        assert widget.hasFocus(), "the user would have to click the box first"
        self.count += 1
        for character in text:
            self.qtbot.keyClick(QApplication.focusWidget(), character)

    def drag(self, widget: QWidget, start: QPoint, end: QPoint) -> None:
        """Press the mouse at `start`, move it to `end` with the button held, release: one action."""
        assert widget.isVisible() and widget.isEnabled(), widget
        self.count += 1
        left = Qt.MouseButton.LeftButton
        self.qtbot.mousePress(widget, left, Qt.KeyboardModifier.NoModifier, start)
        middle = (start + end) / 2
        for point in (middle, end):
            self.qtbot.mouseMove(widget, point)
        self.qtbot.mouseRelease(widget, left, Qt.KeyboardModifier.NoModifier, end)


@pytest.fixture
def fresh_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home folder (outputs, sample models) and, with the conftest, empty config and settings."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def _button(window, text: str) -> QPushButton:
    found = [b for b in window.findChildren(QPushButton) if b.text() == text and b.isVisible()]
    assert len(found) == 1, [b.text() for b in found]
    return found[0]


def _result_is_shown(qtbot, window, output_under: Path) -> None:
    record = wait_for_job(qtbot, window, window.jobs.selected, JOB_MS)
    assert record.status == "done", record.log[-5:]
    assert window.current_page() == "jobs"
    qtbot.waitUntil(lambda: window.jobs.summary.text().startswith("Wrote "), timeout=10_000)
    assert str(output_under) in window.jobs.summary.text()
    assert window.jobs.open_button.isEnabled()


def test_first_merge_with_the_sample_models_takes_two_actions(qtbot, fresh_profile, make_window):
    window = make_window()
    assert window.current_page() == "welcome"  # a fresh profile starts on the Start page
    act = Actions(qtbot)
    act.click(window.welcome.try_button)
    run = window.merge.run_button
    qtbot.waitUntil(lambda: window.current_page() == "merge" and run.isEnabled(), timeout=JOB_MS)
    act.click(run)
    _result_is_shown(qtbot, window, fresh_profile)
    assert act.count == 2 <= 4


@pytest.mark.long
def test_a_hub_merge_of_three_models_takes_four_actions(qtbot, fresh_profile, hub_env, models, make_window):
    server = hub_env.server
    server.add_model("smith/tiny-base", models.base, downloads=300)
    for name, folder, downloads in (("tiny-chat", models.tune_a, 200), ("tiny-code", models.tune_b, 100)):
        server.add_model(f"smith/{name}", folder, downloads=downloads, tags=["base_model:smith/tiny-base"],
                         card_data={"base_model": "smith/tiny-base"})
    window = make_window()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)
    assert window.current_page() == "welcome"
    act = Actions(qtbot)
    act.type(window.welcome.search_edit, "tiny")
    search = window.models.hub
    assert window.current_page() == "models" and search.search_edit.text() == "tiny"
    assert window.welcome.search_edit.text() == ""
    qtbot.waitUntil(lambda: search.results.rowCount() == 3, timeout=15_000)
    results = search.results
    act.drag(results.viewport(), results.visualItemRect(results.item(0, 0)).center(),
             results.visualItemRect(results.item(2, 0)).center())
    add = search.details_pane.add_button
    qtbot.waitUntil(lambda: add.isEnabled() and add.text() == "Add 3 models to merge", timeout=15_000)
    act.click(add)
    page = window.merge
    assert window.current_page() == "merge"
    assert page.base_picker.text() == "smith/tiny-base"
    assert [ref for ref, _, _ in page.table.entries()] == ["smith/tiny-chat", "smith/tiny-code"]
    qtbot.waitUntil(page.run_button.isEnabled, timeout=JOB_MS)
    act.click(page.run_button)
    _result_is_shown(qtbot, window, fresh_profile)
    assert act.count == 4
