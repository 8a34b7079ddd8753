"""Reusing freed memory during a job, on Linux with glibc.

A merge allocates tensors of the same few sizes over and over. glibc hands blocks this large straight back to
the system when they are freed, so every new tensor page-faults all of its memory in again, which on a CPU
merge costs more than the arithmetic (slerp ran twice as fast without it). While a job runs, big blocks come
from the heap and freed memory is kept for the next tensor; afterwards it is returned to the system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULT_TRIM_THRESHOLD, _DEFAULT_MMAP_MAX = 128 * 1024, 65536
_lock = threading.Lock()
_users = 0


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt  # noqa: B018 - musl and others lack it
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


@contextmanager
def reuse_freed_memory() -> Iterator[None]:
    """Within the block, keep freed memory for reuse; on leaving it, give the memory back (no-op off glibc)."""
    global _users
    libc = _glibc()
    if libc is None:
        yield
        return
    with _lock:
        _users += 1
        if _users == 1:
            libc.mallopt(_M_MMAP_MAX, 0)
            libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
                libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
                libc.malloc_trim(0)
