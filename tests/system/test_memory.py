"""A job process shares two malloc heaps among its threads and reuses the blocks it frees (glibc), so what the
allocator keeps stays flat and a block's pages are not faulted in again for every block."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heaps")

# Each child starts as the mergesmith command does ("entry") or as a plain interpreter ("plain").
_START = textwrap.dedent(
    """
    import ctypes, sys
    if sys.argv[1] == "entry":
        from guiapp.__main__ import main
        try:
            main(["--version"])
        except SystemExit:
            pass
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    """
)

# Eight threads allocate and stay alive together (a thread that has ended hands its heap to the next), then
# glibc's own report (malloc_info) is counted: one <heap> element per heap.
_CHILD = _START + textwrap.dedent(
    """
    import os, tempfile, threading
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
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "malloc.xml")
        report = libc.fopen(path.encode(), b"w")
        libc.malloc_info(0, ctypes.c_void_p(report))
        libc.fclose(ctypes.c_void_p(report))
        barrier.wait()
        print(open(path).read().count("<heap nr="))
    """
)


# A 16 MB block (a block of a merge, a little larger) is written, freed, allocated and written again: the page
# faults of the second round are counted (4096 when its pages come fresh from the system).
_REUSE_CHILD = _START + textwrap.dedent(
    """
    import resource
    size = 16 << 20
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(ctypes.c_void_p(block))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)

# 96 MB of blocks are freed between small allocations that stay (so they are holes, not a heap's free top, which
# glibc returns by itself); then the heaps are trimmed with a budget above and one below what they hold free.
_BUDGET_CHILD = textwrap.dedent(
    """
    import ctypes
    from guiapp.system import memory
    memory.configure_heaps()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    def private_mb():
        line = next(line for line in open("/proc/self/status") if line.startswith("RssAnon:"))
        return int(line.split()[1]) // 1024
    blocks, pins = [], []
    for _ in range(12):
        blocks.append(libc.malloc(8 << 20))
        pins.append(libc.malloc(1 << 20))  # larger than any hole the interpreter left
    for block in blocks:
        ctypes.memset(block, 1, 8 << 20)
    for block in blocks:
        libc.free(ctypes.c_void_p(block))
    held, free = private_mb(), memory.heap_bytes_free() >> 20
    memory.release_free_memory(above=512 << 20)
    kept = private_mb()
    memory.release_free_memory(above=32 << 20)
    print(free, held, kept, private_mb())
    """
)


def _run(child: str, how: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", child, how], env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
        check=True,
    )
    return done.stdout


def _heaps(how: str, **env: str) -> int:
    return int(_run(_CHILD, how, **env).split()[-1])


def _faults_of_a_reused_block(how: str, **env: str) -> int:
    return int(_run(_REUSE_CHILD, how, **env).split()[-1])


def test_threads_of_a_process_started_by_mergesmith_share_two_heaps():
    assert _heaps("entry") == 2


def test_without_the_cap_the_same_threads_take_more_heaps():
    # The measurement can tell: the same threads in a process that did not start through mergesmith.
    assert _heaps("plain") > 2


def test_a_heap_count_the_user_chose_is_kept():
    assert _heaps("entry", MALLOC_ARENA_MAX="4") == 4


def test_a_freed_block_is_reused_without_faulting_its_pages_in_again():
    assert _faults_of_a_reused_block("entry") < 256


def test_without_the_setting_the_same_block_comes_fresh_from_the_system():
    assert _faults_of_a_reused_block("plain") > 2048


def test_a_threshold_the_user_chose_is_kept():
    assert _faults_of_a_reused_block("entry", MALLOC_MMAP_THRESHOLD_=str(1 << 20)) > 2048


def test_free_heap_memory_is_returned_only_beyond_the_budget():
    free_mb, held, kept, after = map(int, _run(_BUDGET_CHILD, "entry").split()[-4:])
    assert free_mb >= 90
    assert kept >= held - 8  # under the budget: kept for the next blocks
    assert after <= held - 80  # over it: returned


# The last handler registered before `main` runs is the last to run at exit: it sees what the interpreter's final
# garbage collection would walk.
_EXIT_CHILD = textwrap.dedent(
    """
    import atexit, gc, sys
    atexit.register(lambda: print(gc.isenabled(), gc.get_freeze_count() > 0))
    if sys.argv[1] == "entry":
        from guiapp.__main__ import main
        try:
            main(["--version"])
        except SystemExit:
            pass
    """
)


@pytest.mark.parametrize(("start", "expected"), [("entry", "False True"), ("plain", "True False")])
def test_a_mergesmith_process_skips_the_garbage_collection_at_exit(start, expected):
    """A `try` process spent 1.2-1.5 s of its exit walking the objects torch and transformers made; started as the
    mergesmith command, a process leaves them to the system, which frees its memory at exit anyway."""
    result = subprocess.run([sys.executable, "-c", _EXIT_CHILD, start], capture_output=True, text=True, check=True)
    assert result.stdout.split("\n")[-2] == expected
