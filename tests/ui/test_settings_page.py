"""The Settings page against the tests' Hub: signing in and out through huggingface_hub, never storing the
token in Mergesmith's own files; offline mode."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt

from tests.support.hub_server import TEST_TOKEN, TEST_USER


def test_sign_in_and_out_keeps_the_token_out_of_our_files(qtbot, window, hub_env, tmp_path):
    page = window.settings
    window.show_page("settings")
    qtbot.waitUntil(lambda: "Not signed in" in page.account.text(), timeout=15_000)
    qtbot.keyClicks(page.token_edit, "hf_wrong")
    qtbot.mouseClick(page.sign_in_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.account.property("status") == "problem", timeout=15_000)
    assert "not accepted" in page.account.text().lower() or "token" in page.account.text().lower()
    assert page.token_edit.text() == "hf_wrong"  # left to be corrected
    page.token_edit.clear()
    qtbot.keyClicks(page.token_edit, TEST_TOKEN)
    qtbot.mouseClick(page.sign_in_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.account.text() == f"Signed in as {TEST_USER}", timeout=15_000)
    assert page.token_edit.text() == ""  # not left on screen
    assert (hub_env.home / "token").read_text().strip() == TEST_TOKEN  # huggingface_hub keeps it
    QSettings().sync()
    ours = [p for folder in (tmp_path / "config", tmp_path / "qsettings") if folder.exists()
            for p in folder.rglob("*") if p.is_file()]
    assert all(TEST_TOKEN not in p.read_text(errors="ignore") for p in ours)
    qtbot.mouseClick(page.sign_out_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Not signed in" in page.account.text(), timeout=15_000)


def test_offline_mode_is_remembered(qtbot, window):
    from guiapp.hub.connection import is_offline, set_offline

    window.settings.offline_check.setChecked(True)
    try:
        assert is_offline()
        assert QSettings().value("hub/offline", False, type=bool) is True
    finally:
        window.settings.offline_check.setChecked(False)
        set_offline(False)
    assert not is_offline()


def test_offline_from_the_environment_is_shown_and_unticking_it_goes_online(qtbot, make_window, hub_env, monkeypatch):
    from huggingface_hub import constants

    from guiapp.hub.connection import is_offline

    # As a user starting the window with HF_HUB_OFFLINE=1 exported: huggingface_hub read it at import.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    window = make_window()
    page = window.settings
    window.show_page("settings")
    assert page.offline_check.isChecked()  # the state in force, not the stored default
    assert "HF_HUB_OFFLINE" in page.offline_source.text() and "environment" in page.offline_source.text()
    qtbot.waitUntil(lambda: page.account.text() != "Checking…", timeout=15_000)
    qtbot.keyClicks(page.token_edit, TEST_TOKEN)
    qtbot.mouseClick(page.sign_in_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.account.property("status") == "problem", timeout=15_000)
    said = page.account.text()
    assert "offline" in said.lower()
    assert "HF_HUB_OFFLINE" not in said and "unset" not in said.lower()  # nothing asks to change the environment
    assert page.token_edit.text() == TEST_TOKEN  # a failed sign-in keeps what was typed

    page.offline_check.setChecked(False)
    assert not is_offline() and not constants.HF_HUB_OFFLINE  # huggingface_hub goes online with the window
    assert "overrid" in page.offline_source.text().lower()
    assert page.token_edit.text() == TEST_TOKEN  # toggling keeps it too
    qtbot.mouseClick(page.sign_in_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.account.text() == f"Signed in as {TEST_USER}", timeout=15_000)
    assert page.token_edit.text() == ""  # a token that was accepted leaves the screen

    page.offline_check.setChecked(True)  # back to what the environment says: no override is kept
    assert is_offline() and constants.HF_HUB_OFFLINE
    assert QSettings().value("hub/offline") is None
