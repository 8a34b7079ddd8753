"""Shared by the packaging tests: the repository's resources and the tools they check with."""

from __future__ import annotations

import importlib.util
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = ROOT / "resources"
ICONS = RESOURCES / "icons"
INSTALLER = ROOT / "packaging" / "install-desktop-entry.sh"


def load_script(path: Path):
    """Load a script (resources/make_icons.py, packaging/build.py) by path: neither folder is a Python package,
    and `packaging` is also the name of a PyPI library."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def validate_desktop_file(path: Path) -> None:
    """desktop-file-validate must accept the file with no error or warning (hints are advice, not faults)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("desktop entries are a Linux feature")
    tool = shutil.which("desktop-file-validate")
    assert tool, "desktop-file-validate is missing: apt-get install desktop-file-utils"
    result = subprocess.run([tool, str(path)], capture_output=True, text=True)
    faults = [line for line in result.stdout.splitlines() if ": error:" in line or ": warning:" in line]
    assert result.returncode == 0 and not faults, result.stdout + result.stderr


def exec_path(desktop_entry: Path) -> str:
    """The program path of the entry's Exec line, unescaped as the desktop entry specification says."""
    line = next(line for line in desktop_entry.read_text().splitlines() if line.startswith("Exec="))
    value = line[len("Exec="):].replace("\\\\", "\\")  # the value is an escaped string first
    assert value.startswith('"') and value.endswith('"'), value
    inner, out, i = value[1:-1], "", 0
    while i < len(inner):  # then a quoted argument: a backslash takes the next character literally
        if inner[i] == "\\":
            i += 1
        out += inner[i]
        i += 1
    return out.replace("%%", "%")


def run_installer(script: Path, data_home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(data_home.parent), "XDG_DATA_HOME": str(data_home)}
    return subprocess.run(["sh", str(script), *args], capture_output=True, text=True, env=env)
