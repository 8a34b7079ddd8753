"""The Linux menu entry: the shipped file validates, and install-desktop-entry.sh installs a valid entry that
starts the program next to it (even from a folder whose name needs quoting), with the icons, then removes them."""

from __future__ import annotations

import os
import shutil

from tests.packaging.helpers import INSTALLER, RESOURCES, exec_path, run_installer, validate_desktop_file


def test_shipped_desktop_file_validates():
    validate_desktop_file(RESOURCES / "mergesmith.desktop")


def _app_folder(parent):
    """The layout of an unpacked bundle: the program and installer on top, resources under _internal/."""
    app = parent / 'My "Apps" $HOME 100%' / "Mergesmith"
    shutil.copytree(RESOURCES / "icons", app / "_internal" / "resources" / "icons")
    shutil.copy2(RESOURCES / "mergesmith.desktop", app / "_internal" / "resources")
    shutil.copy2(INSTALLER, app)
    program = app / "mergesmith"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    return app


def test_installer_adds_and_removes_the_menu_entry(tmp_path):
    app = _app_folder(tmp_path)
    data = tmp_path / "home" / ".local" / "share"

    result = run_installer(app / "install-desktop-entry.sh", data)
    assert result.returncode == 0, result.stderr
    entry = data / "applications" / "mergesmith.desktop"
    validate_desktop_file(entry)
    assert exec_path(entry) == str(app / "mergesmith")
    icons = data / "icons" / "hicolor"
    assert (icons / "scalable" / "apps" / "mergesmith.svg").is_file()
    for png in (RESOURCES / "icons").glob("mergesmith-*.png"):
        size = png.stem.split("-")[1]
        assert (icons / f"{size}x{size}" / "apps" / "mergesmith.png").read_bytes() == png.read_bytes()

    result = run_installer(app / "install-desktop-entry.sh", data, "--uninstall")
    assert result.returncode == 0, result.stderr
    assert not entry.exists()
    assert not list(icons.rglob("mergesmith.*"))


def test_installer_refuses_to_run_outside_the_app_folder(tmp_path):
    script = tmp_path / "install-desktop-entry.sh"
    shutil.copy2(INSTALLER, script)
    result = run_installer(script, tmp_path / "data")
    assert result.returncode == 1
    assert "unpacked Mergesmith folder" in result.stderr
    assert not (tmp_path / "data").exists()
    assert os.access(INSTALLER, os.X_OK), "the installer must be executable in the repository"
