"""Giving the memory a job has freed back to the system.

The C allocator (glibc's malloc) keeps what a program frees in its heaps, to reuse it. The merge loop allocates
and frees blocks of a few MB on three threads, thousands of times in a large merge; what glibc keeps then grows
with the length of the merge, not with the size of a block (measured on a linear merge: 207 MB at 1 GB, 244 MB
at 7 B). Trimming the heaps after each tensor keeps the peak what the blocks themselves need.
"""

from __future__ import annotations

import ctypes
import functools
import sys


def release_free_memory() -> None:
    """Return the pages the C allocator holds free to the system (glibc's malloc_trim). Does nothing where the C
    library has no such call (macOS, Windows, musl); never raises."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None
