"""Where the app's resources (icons, desktop entry, help pages) are, for every way Mergesmith can be installed.

They live in the repository's top-level `resources/` folder and are found:
- in the bundled app, in `resources/` beside the frozen modules (packaging/mergesmith.spec adds it);
- in a source checkout or editable install, in `resources/` at the repository root;
- in an installed wheel (pip, pipx), in `<prefix>/share/mergesmith/` (pyproject's data-files put them there).
Plain Python (no Qt), so it is cheap to import from anywhere in the window.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path

_MARKER = "mergesmith.desktop"  # present in every copy of the folder, and in nothing else's


def resources_dir() -> Path:
    """The folder holding mergesmith.desktop and icons/; FileNotFoundError if this installation has none."""
    candidates = []
    if getattr(sys, "frozen", False):
        candidates.append(Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent)) / "resources")
    candidates.append(Path(__file__).resolve().parents[2] / "resources")
    candidates += [Path(prefix) / "share" / "mergesmith" for prefix in (sys.prefix, site.getuserbase())]
    for candidate in candidates:
        if (candidate / _MARKER).is_file():
            return candidate
    raise FileNotFoundError("Mergesmith's resources folder was not found; reinstalling Mergesmith restores it.")


def icon_file(size: int | None = None) -> Path:
    """The app icon: the SVG, or the PNG of `size` pixels (16, 24, 32, 48, 64, 128, 256 or 512)."""
    name = "mergesmith.svg" if size is None else f"mergesmith-{size}.png"
    return resources_dir() / "icons" / name


def help_document(name: str) -> Path:
    """docs/`name` (recipes.md, getting-started.md), a page of Help: beside the modules in a source checkout and in
    the bundled app (packaging/mergesmith.spec puts it in `docs/`), in the resources folder (`docs/`) of an
    installed wheel. FileNotFoundError if this installation has none."""
    candidates = [Path(__file__).resolve().parents[2] / "docs" / name]
    try:
        candidates.append(resources_dir() / "docs" / name)
    except FileNotFoundError:
        pass
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"The help page {name} is not part of this installation; reinstalling Mergesmith "
                            "restores it (it is in the docs folder of Mergesmith's source).")
