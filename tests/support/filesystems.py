"""Small real file systems for tests: a tmpfs of a chosen size, optionally read-only (needs root to mount)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_filesystem(mount_point: Path, size: str, read_only: bool = False) -> Iterator[Path]:
    """Mount a tmpfs of `size` (e.g. "2M") at `mount_point` for the duration; skip the test where mounting
    is not allowed (not root, or a sandbox without mount rights)."""
    mount_point.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)
