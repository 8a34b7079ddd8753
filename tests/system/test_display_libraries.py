"""The start-up check of the libraries Qt's xcb plugin needs: read from the real plugin's ELF, checked against a
library folder that lacks some of them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from guiapp.__main__ import main
from guiapp.cli.process import EXIT_FAILED
from guiapp.system import display_libraries
from guiapp.system.display_libraries import install_advice, missing_libraries, needed_libraries, xcb_plugin
from guiapp.ui import launch

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


@pytest.fixture
def answering_display():
    """A DISPLAY value at which something accepts connections, as an X server does (Linux's abstract socket)."""
    number = next(n for n in range(97, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listening:
        listening.bind(f"\0/tmp/.X11-unix/X{number}")
        listening.listen()
        yield f":{number}"


def test_the_start_check_names_every_missing_library_and_its_packages(tmp_path, monkeypatch, answering_display):
    folder = _folder_without(tmp_path, "libxcb-icccm.so.4", "libxcb-keysyms.so.1")
    monkeypatch.setattr(display_libraries, "loader_folders", lambda: [folder])
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("DISPLAY", answering_display)
    problem = launch._display_problem()
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in problem
    assert "sudo apt install libxcb-icccm4 libxcb-keysyms1" in problem
    assert "sudo dnf install xcb-util-wm xcb-util-keysyms" in problem
    assert main([]) == EXIT_FAILED  # the window is not tried: Qt would abort the process


def test_a_library_without_a_known_package_is_still_named():
    advice = install_advice(["libxcb-icccm.so.4", "libunheard-of.so.3"])
    assert "sudo apt install libxcb-icccm4" in advice and "sudo dnf install xcb-util-wm" in advice
    assert "libunheard-of.so.3" in advice and "apt-file search libunheard-of.so.3" in advice


def test_a_file_that_is_not_a_library_is_refused(tmp_path):
    text = tmp_path / "libfake.so"
    text.write_text("not a library")
    with pytest.raises(ValueError, match="not an ELF file"):
        needed_libraries(text)


def _run_window(*args: str, display: str | None, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    if display is not None:
        env["DISPLAY"] = display
    if home is not None:
        env["HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "guiapp", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def _unused_display() -> str:
    number = next(n for n in range(97, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists()
                  and display_libraries.display_answers(f":{n}") is False)
    return f":{number}"


def test_a_display_that_does_not_answer_is_said_in_plain_words(tmp_path):
    display = _unused_display()  # as a DISPLAY left over from an ended session, or copied from another machine
    run = _run_window(display=display)
    assert run.returncode == 1, run.stderr  # not Qt's abort (134)
    assert f"DISPLAY={display}" in run.stderr and "does not answer" in run.stderr
    assert "xvfb-run" in run.stderr and "xcb-cursor0" not in run.stderr


def test_without_a_display_the_message_offers_a_virtual_one():
    run = _run_window(display=None)
    assert run.returncode == 1 and "xvfb-run" in run.stderr


@pytest.mark.long
@pytest.mark.usefixtures("probe_in_cache")  # the self-test's window finds the run's probe, as on a second start
def test_the_self_test_says_the_display_does_not_answer_and_runs_offscreen(tmp_path):
    """The self-test without a display: the launcher drops the display that does not answer, and from there it runs
    as with none at all (choosing offscreen itself), so this one run is the self-test's end-to-end case."""
    display = _unused_display()
    run = _run_window("--self-test", display=display, home=tmp_path)  # nothing may land in the real home either
    assert f"DISPLAY={display}" in run.stderr and "does not answer" in run.stderr
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Self-test passed" in run.stdout
    assert "propagateSizeHints" not in run.stderr  # Qt's notes for developers stay out of the terminal
    assert not (tmp_path / "Mergesmith").exists()


def test_the_readme_and_ci_install_the_libraries_the_apps_table_names():
    root = Path(__file__).resolve().parents[2]
    readme = " ".join(root.joinpath("README.md").read_text().replace("`", " ").split())
    for line in install_advice(list(display_libraries.PACKAGES)).splitlines():
        command = line.split(": ", 1)[1]  # "sudo apt install …", "sudo dnf install …": the whole table, in order
        assert command in readme, command
    ci = subprocess.run(["bash", "-c", "source <(grep -A2 '^window_packages()' .ci/run); window_packages"],
                        cwd=root, capture_output=True, text=True, timeout=60)
    debian = install_advice(list(display_libraries.PACKAGES)).splitlines()[0].split("apt install ", 1)[1]
    assert ci.stdout.split() == debian.split() and not ci.stderr, ci.stderr
