"""Keeping what the C allocator holds for a job close to what the job uses.

The C allocator (glibc's malloc) keeps what a program frees in its heaps, to reuse it. The merge loop allocates
and frees blocks of a few MB on three threads, thousands of times in a large merge; what glibc keeps then grows
with the length of the merge, not with the size of a block (measured on a linear merge: 207 MB at 1 GB, 244 MB
at 7 B). Trimming the heaps after each tensor keeps the peak what the blocks themselves need.

glibc also gives each thread that allocates a heap of its own, up to eight per core: the reader, the writer, the
merge and torch's threads each keep their own free blocks. A streamed TIES merge of a 7 B model peaked at 644 MB
that way and at 334 MB with two heaps (324 MB at 1 GB), so a job process caps them (`limit_heaps`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

HEAPS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h


def release_free_memory() -> None:
    """Return the pages the C allocator holds free to the system (glibc's malloc_trim). Does nothing where the C
    library has no such call (macOS, Windows, musl); never raises."""
    trim = _c_function("malloc_trim")
    if trim is not None:
        trim(0)


def limit_heaps() -> None:
    """Let the threads that allocate from now on share `HEAPS` malloc heaps. Call it when the process starts,
    before its threads do: glibc stops counting its heaps once it has made more than eight. A `MALLOC_ARENA_MAX`
    the user set is left as it is. Does nothing without glibc; never raises."""
    mallopt = _c_function("mallopt")
    if mallopt is not None and "MALLOC_ARENA_MAX" not in os.environ:
        mallopt(_M_ARENA_MAX, HEAPS)


@functools.cache
def _c_function(name: str):
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), name, None)
    except OSError:
        return None
