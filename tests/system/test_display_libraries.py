"""The start-up check of the libraries Qt's xcb plugin needs: read from the real plugin's ELF, checked against a
library folder that lacks some of them."""

from __future__ import annotations

import sys

import pytest

from guiapp import cli
from guiapp.system import display_libraries
from guiapp.system.display_libraries import install_advice, missing_libraries, needed_libraries, xcb_plugin

PLUGIN = xcb_plugin()
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or PLUGIN is None,
                                reason="PySide6's xcb plugin exists on Linux only")


def _folder_without(tmp_path, *absent: str):
    """A library folder holding (as empty stand-ins) every system library the plugin needs except `absent`."""
    folder = tmp_path / "lib"
    folder.mkdir()
    for soname in missing_libraries(PLUGIN, folders=[]):
        if soname not in absent:
            (folder / soname).touch()
    return folder


def test_the_real_plugin_names_the_xcb_libraries_it_links():
    needed = needed_libraries(PLUGIN)
    assert "libQt6XcbQpa.so.6" in needed
    assert {"libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0", "libc.so.6"} <= set(needed)


def test_libraries_reached_through_the_bundled_qt_libraries_count_too():
    every_system_library = missing_libraries(PLUGIN, folders=[])
    assert "libQt6XcbQpa.so.6" not in every_system_library  # bundled with PySide6: found beside the plugin
    assert "libfontconfig.so.1" in every_system_library  # needed by libQt6Gui, not by the plugin itself


def test_a_folder_lacking_two_libraries_reports_exactly_those(tmp_path):
    folder = _folder_without(tmp_path, "libxcb-icccm.so.4", "libxcb-keysyms.so.1")
    assert missing_libraries(PLUGIN, folders=[folder]) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]


def test_the_start_check_names_every_missing_library_and_its_packages(tmp_path, monkeypatch):
    folder = _folder_without(tmp_path, "libxcb-icccm.so.4", "libxcb-keysyms.so.1")
    monkeypatch.setattr(display_libraries, "loader_folders", lambda: [folder])
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("DISPLAY", ":99")
    problem = cli._display_problem()
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in problem
    assert "sudo apt install libxcb-icccm4 libxcb-keysyms1" in problem
    assert "sudo dnf install xcb-util-wm xcb-util-keysyms" in problem
    assert cli.main([]) == cli.EXIT_FAILED  # the window is not tried: Qt would abort the process


def test_a_library_without_a_known_package_is_still_named():
    advice = install_advice(["libxcb-icccm.so.4", "libunheard-of.so.3"])
    assert "sudo apt install libxcb-icccm4" in advice and "sudo dnf install xcb-util-wm" in advice
    assert "libunheard-of.so.3" in advice and "apt-file search libunheard-of.so.3" in advice


def test_a_file_that_is_not_a_library_is_refused(tmp_path):
    text = tmp_path / "libfake.so"
    text.write_text("not a library")
    with pytest.raises(ValueError, match="not an ELF file"):
        needed_libraries(text)
