"""Where Mergesmith keeps its own small settings files (never tokens: huggingface_hub keeps those).

The folder is `MERGESMITH_CONFIG_DIR` when set (tests and portable installs use it), otherwise the platform's
user config folder: `%APPDATA%\\Mergesmith` on Windows, `~/Library/Application Support/Mergesmith` on macOS,
`$XDG_CONFIG_HOME/mergesmith` (default `~/.config/mergesmith`) elsewhere. It is read on every call, not at
import, so a changed environment takes effect at once.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path


def config_dir() -> Path:
    """The folder for Mergesmith's settings files (not created here; writers create it when they first write)."""
    override = os.environ.get("MERGESMITH_CONFIG_DIR")
    if override:
        return expanded(override)
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or home_dir() / "AppData" / "Roaming") / "Mergesmith"
    if sys.platform == "darwin":
        return home_dir() / "Library" / "Application Support" / "Mergesmith"
    return Path(os.environ.get("XDG_CONFIG_HOME") or home_dir() / ".config") / "mergesmith"


def home_dir() -> Path:
    """The user's home folder. When it cannot be determined (HOME unset and no passwd entry for this user, as in
    some containers), a private folder in the temp directory stands in, so settings and caches still work
    for this session. Never raises."""
    try:
        return Path.home()
    except RuntimeError:
        return _stand_in_home()


def _stand_in_home() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(tempfile.gettempdir()) / f"mergesmith-home-{uid}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        status = folder.lstat()
        if stat.S_ISDIR(status.st_mode) and (not hasattr(os, "getuid") or status.st_uid == uid):
            return folder
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="mergesmith-home-"))  # the shared name is taken by someone else


def settings_file(name: str) -> Path:
    """The path of the settings file `name` (e.g. "local_folders.json") inside `config_dir()`."""
    return config_dir() / name


def resolved(path: Path | str) -> Path:
    """`path` with `~` expanded and its links followed, absolute. Never raises: a loop of links (which pathlib
    raises RuntimeError about) or a name the system cannot look up is kept as written, made absolute, so the
    problem is reported where the path is used, by what it is."""
    path = expanded(path)
    try:
        return path.resolve()
    except (OSError, RuntimeError, ValueError):
        return Path(os.path.abspath(path))


def expanded(path: Path | str) -> Path:
    """`path` with a leading `~` or `~user` expanded. Never raises: pathlib's expanduser raises RuntimeError for a
    user this computer does not have, where os.path leaves the text as it is (then reported where it is used)."""
    return Path(os.path.expanduser(os.fspath(path)))
