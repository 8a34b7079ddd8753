"""Keeping what the C allocator holds for a job close to what the job uses, without paying for it again and again.

The C allocator (glibc's malloc) keeps what a program frees in its heaps, to reuse it. The merge loop allocates
and frees blocks of a few MB on three threads, thousands of times in a large merge.

Left to its defaults, glibc moves two thresholds as the program runs: blocks above the first are mapped fresh from
the system and returned on free, and free memory above the second at the top of a heap is returned at once. Either
way the next block's pages are faulted in and zeroed again by the kernel: in a streamed TIES merge of a 1 GB model
that was 2.2-2.9 million page faults and 10-14 s of system time in a 27-32 s merge. A job process therefore fixes
both thresholds well above a block (`configure_heaps`), so blocks come from the heaps and are reused.

glibc also gives each thread that allocates a heap of its own, up to eight per core: the reader, the writer, the
merge and torch's threads each keep their own free blocks. A streamed TIES merge of a 7 B model peaked at 644 MB
that way and at 334 MB with two heaps (324 MB at 1 GB), so a job process caps them too.

What the heaps hold free is returned to the system once a job ends, and after a tensor when it has grown beyond
`FREE_HEAP_BUDGET`: blocks come in many sizes (a million entries in whole rows of each tensor's width), so a new
block often fits none of the holes the last ones left and the heap grows instead. In a 1 GB TIES merge the heaps
held 80 MB free after the first tensor and 185 MB after the last (what was in use stayed near 100 MB), and the
peak grew with the number of tensors: 363-402 MB at 1 GB, 444 MB at 7 B with a 256 MB budget; 290-295 MB at 1 GB
with 128 MB, for 0.8-1 M page faults more (2 s of system time, 2-3 % of the merge's time).
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import functools
import gc
import os
import sys

HEAPS = 2
# Blocks (a million entries, 4-8 MB) stay well below the first; whole tensors of the methods that need them whole
# (hundreds of MB) are still mapped and returned on free. The second lets a heap keep one set of blocks' memory.
MAPPED_ABOVE = 32 << 20
TRIMMED_ABOVE = 64 << 20
FREE_HEAP_BUDGET = 128 << 20
# mallopt's parameter numbers in glibc's malloc.h, and the environment variables that set the same values
_OPTIONS = {"MALLOC_ARENA_MAX": (-8, HEAPS), "MALLOC_MMAP_THRESHOLD_": (-3, MAPPED_ABOVE),
            "MALLOC_TRIM_THRESHOLD_": (-1, TRIMMED_ABOVE)}


class _MallocInfo(ctypes.Structure):
    """glibc's struct mallinfo2 (2.33 and later)."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def release_free_memory(above: int = 0) -> None:
    """Return the pages the C allocator holds free to the system (glibc's malloc_trim), if it holds more than
    `above` bytes free (without a way to tell, whatever it holds). Does nothing where the C library has no such call
    (macOS, Windows, musl); never raises."""
    trim = _c_function("malloc_trim")
    if trim is None:
        return
    free = heap_bytes_free() if above > 0 else None
    if free is None or free > above:
        trim(0)


def heap_bytes_free() -> int | None:
    """Bytes the C allocator's heaps hold free (glibc's mallinfo2), or None where it cannot say."""
    info = _c_function("mallinfo2")
    if info is None:
        return None
    info.restype = _MallocInfo
    return int(info().fordblks)


@functools.cache
def skip_the_collection_at_exit() -> None:
    """Have this process, when it exits, leave its objects to the system instead of collecting them first. The
    interpreter's last garbage collection walks every object torch and transformers made: 1.2-1.5 s of a `try`
    process's exit on a quiet CPU, for memory the system takes back with the process anyway. Cyclic garbage left at
    exit is not finalized (no file of ours is left open in a cycle: they are closed when written). Registered once;
    the handlers registered before it (those of the interpreter's start) still run after it."""
    atexit.register(_freeze_everything)


def _freeze_everything() -> None:
    gc.disable()
    gc.freeze()


def configure_heaps() -> None:
    """Let the threads that allocate from now on share `HEAPS` malloc heaps, and fix the thresholds above which glibc
    maps an allocation of its own (`MAPPED_ABOVE`) and returns a heap's free top (`TRIMMED_ABOVE`). Call it when
    the process starts, before its threads do: glibc stops counting its heaps once it has made more than eight.
    A value the user set through glibc's environment variables is left as it is. Does nothing without glibc; never
    raises."""
    mallopt = _c_function("mallopt")
    if mallopt is None:
        return
    for variable, (option, value) in _OPTIONS.items():
        if variable not in os.environ:
            mallopt(option, value)


_PROT_READ, _MAP_SHARED = 1, 1
_MADV_POPULATE_READ = 22  # Linux 5.14 and later; Python's mmap module has no name for it before 3.13


def read_into_page_cache(fileno: int, offset: int, length: int) -> bool | None:
    """Have the kernel read `length` bytes of the open file `fileno` from `offset` (a multiple of the page size)
    into the system's page cache, without copying them into the process: madvise(MADV_POPULATE_READ) on a map of
    the range that is never touched. The calls go through ctypes, which lets other threads run while the kernel
    waits for the disk (Python's mmap.madvise holds the interpreter lock: a merge's main thread stalled behind it).

    Returns True when done, False when the range could not be read (a file cut meanwhile: the kernel returns an
    error where touching the pages would raise SIGBUS), None where the system cannot do this (not Linux, a kernel
    older than 5.14, a file system without maps). Never raises.
    """
    libc = _libc()
    if libc is None:
        return None
    address = libc.mmap(None, length, _PROT_READ, _MAP_SHARED, fileno, offset)
    if address is None or address == ctypes.c_void_p(-1).value:  # a file system that cannot map files
        return None
    try:
        if libc.madvise(address, length, _MADV_POPULATE_READ) == 0:
            return True
        return None if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS) else False
    finally:
        libc.munmap(address, length)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library (Linux only; mmap, madvise and munmap declared), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _c_function(name: str):
    libc = _libc()
    return getattr(libc, name, None) if libc is not None else None
