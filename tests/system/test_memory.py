"""A job process shares two malloc heaps among its threads (glibc), so what the allocator keeps stays flat."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heaps")

# Eight threads allocate and stay alive together (a thread that has ended hands its heap to the next), then
# glibc's own report (malloc_info) is counted: one <heap> element per heap.
_CHILD = textwrap.dedent(
    """
    import ctypes, os, sys, tempfile, threading
    if sys.argv[1] == "entry":
        from guiapp.cli import main
        try:
            main(["--version"])
        except SystemExit:
            pass
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.fopen.restype = ctypes.c_void_p
    barrier = threading.Barrier(9)
    def allocate():
        libc.malloc(4096)
        barrier.wait()
        barrier.wait()
    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for thread in threads:
        thread.start()
    barrier.wait()
    path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
    report = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(report))
    libc.fclose(ctypes.c_void_p(report))
    barrier.wait()
    print(open(path).read().count("<heap nr="))
    """
)


def _heaps(how: str, **env: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, how], env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
        check=True,
    )
    return int(done.stdout.split()[-1])


def test_threads_of_a_process_started_by_mergesmith_share_two_heaps():
    assert _heaps("entry") == 2


def test_without_the_cap_the_same_threads_take_more_heaps():
    # The measurement can tell: the same threads in a process that did not start through mergesmith.
    assert _heaps("plain") > 2


def test_a_heap_count_the_user_chose_is_kept():
    assert _heaps("entry", MALLOC_ARENA_MAX="4") == 4
