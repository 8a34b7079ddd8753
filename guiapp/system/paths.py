"""Where Mergesmith keeps its own small settings files (never tokens: huggingface_hub keeps those).

The folder is `MERGESMITH_CONFIG_DIR` when set (tests and portable installs use it), otherwise the platform's
user config folder: `%APPDATA%\\Mergesmith` on Windows, `~/Library/Application Support/Mergesmith` on macOS,
`$XDG_CONFIG_HOME/mergesmith` (default `~/.config/mergesmith`) elsewhere. It is read on every call, not at
import, so a changed environment takes effect at once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def config_dir() -> Path:
    """The folder for Mergesmith's settings files (not created here; writers create it when they first write)."""
    override = os.environ.get("MERGESMITH_CONFIG_DIR")
    if override:
        return Path(override).expanduser()
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming") / "Mergesmith"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "Mergesmith"
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "mergesmith"


def settings_file(name: str) -> Path:
    """The path of the settings file `name` (e.g. "local_folders.json") inside `config_dir()`."""
    return config_dir() / name
