"""Open output folder and Open on the Hub: when no program opens the address, the window says so and
shows it in a selectable field with Copy; when one does, nothing else is shown."""

from __future__ import annotations

import yaml
from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtGui import QDesktopServices, QGuiApplication

from tests.ui.conftest import wait_for_job


class _Opener(QObject):
    """A program that opens file addresses (what a file manager is to QDesktopServices)."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[str] = []

    @Slot("QUrl")
    def open(self, url) -> None:
        self.opened.append(url.toLocalFile())


def _merged(qtbot, window, models, output):
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "linear", "models": [
        {"model": str(models.tune_a), "parameters": {"weight": 0.5}},
        {"model": str(models.tune_b), "parameters": {"weight": 0.5}}]}))
    page.output_edit.setText(str(output))
    return wait_for_job(qtbot, window, page.run())


def test_open_output_folder_shows_the_path_to_copy_when_nothing_opens_it(qtbot, window, models, tmp_path):
    assert _merged(qtbot, window, models, tmp_path / "merged").status == "done"
    fallback = window.jobs.open_fallback
    opener = _Opener()
    QDesktopServices.setUrlHandler("file", opener, "open")
    try:
        qtbot.mouseClick(window.jobs.open_button, Qt.MouseButton.LeftButton)
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert opener.opened == [str(tmp_path / "merged")] and fallback.isHidden()
    qtbot.mouseClick(window.jobs.open_button, Qt.MouseButton.LeftButton)  # this machine has no file manager
    assert fallback.isVisible() and "No program to open folders" in fallback.message.text()
    assert fallback.address.text() == str(tmp_path / "merged")
    qtbot.mouseClick(fallback.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == str(tmp_path / "merged")


def test_open_on_the_hub_shows_the_address_to_copy_when_no_browser_opens_it(qtbot, window, models, hub_env,
                                                                           hub_server):
    hub_server.add_model("org/tiny-chat", models.tune_a)
    window.show_page("models")
    pane = window.models.details_pane
    pane.open_details("org/tiny-chat")
    qtbot.waitUntil(pane.page_button.isEnabled, timeout=20_000)
    qtbot.mouseClick(pane.page_button, Qt.MouseButton.LeftButton)
    assert pane.page_link.isVisible() and pane.page_link.address.text() == f"{hub_server.url}/org/tiny-chat"
    assert "No program to open web pages" in pane.page_link.message.text()
