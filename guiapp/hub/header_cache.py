"""Model headers kept for the life of the process: a window session, or the CLI's one job.

A model's headers are asked for several times per job (the window validates on every edit, the job plans, the
estimate and the pair check look again); for a Hub model each read costs range requests. Entries are keyed by
what identifies one version of a model: (endpoint, repo id, commit) for the Hub, (folder, the weight files'
identity) for a local folder, so a new commit or a rewritten file is read afresh and never served stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# Headers of a large model take a few megabytes as Python objects; a session touches a handful of models.
_MAX_ENTRIES = 32

_entries: OrderedDict[Hashable, Any] = OrderedDict()
_lock = threading.Lock()


def cached_headers(key: Hashable, read: Callable[[], T]) -> T:
    """The value stored under `key`, or `read()`'s result, stored. Errors from `read` are raised, not stored.

    Two threads asking for the same missing key may both read it; the second result replaces the first.
    """
    with _lock:
        if key in _entries:
            _entries.move_to_end(key)
            return _entries[key]
    value = read()
    with _lock:
        _entries[key] = value
        while len(_entries) > _MAX_ENTRIES:
            _entries.popitem(last=False)
    return value


def folder_version(folder: Path, names: Iterable[str]) -> tuple:
    """What identifies the current content of the files `names` in `folder`: size, mtime and inode of each.

    Raises OSError when one of them cannot be examined.
    """
    version = []
    for name in sorted(names):
        stat = (folder / name).stat()
        version.append((name, stat.st_size, stat.st_mtime_ns, stat.st_ino))
    return tuple(version)
