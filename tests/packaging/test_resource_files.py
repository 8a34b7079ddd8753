"""The window finds its icons from a source checkout and from an installed wheel (the bundle is checked by
test_bundle.py, which runs the frozen app)."""

from __future__ import annotations

import os
import subprocess
import sys

from guiapp.ui.resource_files import help_document, icon_file, resources_dir
from tests.packaging.helpers import RESOURCES, ROOT


def test_checkout_uses_the_top_level_resources():
    assert resources_dir() == RESOURCES
    assert icon_file().name == "mergesmith.svg" and icon_file().is_file()
    assert icon_file(48).is_file()
    assert help_document("recipes.md") == ROOT / "docs" / "recipes.md"


def test_installed_wheel_finds_its_resources(tmp_path):
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    # The wheel's copy, not the checkout's: with a PYTHONPATH naming the checkout (how tests are run from a
    # worktree) pip found Mergesmith already installed and the child imported the checkout.
    without_checkout = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)],
        check=True,
    )
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # This interpreter's pip installs into the new environment (which has no pip of its own, to stay fast).
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", *map(str, wheels.glob("*.whl"))],
        check=True, env=without_checkout,
    )
    shown = subprocess.run(
        [str(python), "-c", "from guiapp.ui.resource_files import icon_file, help_document; print(icon_file(48)); "
         "print(help_document('recipes.md')); print(help_document('getting-started.md'))"],
        capture_output=True, text=True, cwd=tmp_path,
        env=without_checkout,
    )
    assert shown.returncode == 0, shown.stderr
    found, doc, guide = shown.stdout.split()
    assert doc == str(venv / "share" / "mergesmith" / "docs" / "recipes.md")
    assert guide == str(venv / "share" / "mergesmith" / "docs" / "getting-started.md")
    assert found == str(venv / "share" / "mergesmith" / "icons" / "mergesmith-48.png")
    assert (RESOURCES / "icons" / "mergesmith-48.png").read_bytes() == open(found, "rb").read()
