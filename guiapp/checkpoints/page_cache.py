"""Reading the next tensor's bytes from disk while the merge computes the current one.

A merge that reads each tensor in several passes (TIES and Breadcrumbs: a sample, a count, then the merge) reads it
from disk in the first pass and from the system's page cache in the others, so the disk sits idle while the later
passes compute, and the first pass waits for the disk. `PageCacheWarmer` reads the next such tensor's bytes in the
meantime, on a thread of its own, and drops them: its first pass then reads from memory. The kernel's own hint
(posix_fadvise WILLNEED) did not do this where it was measured: a hinted 350 MB range read back as slowly as a cold
one. What the warmer holds is one 8 MB buffer; the pages it brings in belong to the page cache, which the system
takes back when it needs the memory.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from guiapp.checkpoints.sources import ModelReader

_CHUNK_BYTES = 8 << 20


class PageCacheWarmer:
    """Warms the tensors listed for some of a loop's tasks, each while the loop works on the task before it.

    `wanted[i]` lists the (reader, tensor name) pairs to warm before the loop starts task i (empty: none). Call
    `reached(i)` when the loop starts task i: the warmer then reads the next task after i that has a list, unless
    it did already. Call `close()` when the loop ends, also on failure: the thread stops after its current read
    (at most 8 MB). A failed read only ends that tensor's warming; the loop's own read reports the problem.
    """

    def __init__(self, wanted: Sequence[Sequence[tuple[ModelReader, str]]]) -> None:
        self._wanted = wanted
        self._reached: int | None = None
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="mergesmith-warm", daemon=True)
        self._thread.start()

    def reached(self, task_index: int) -> None:
        with self._changed:
            self._reached = task_index
            self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()
        self._thread.join()

    def _upcoming(self) -> int | None:
        """The first task after the one the loop has reached that has tensors to warm (None: none, or not started)."""
        if self._reached is None:
            return None
        return next((index for index in range(self._reached + 1, len(self._wanted)) if self._wanted[index]), None)

    def _run(self) -> None:
        scratch = memoryview(bytearray(_CHUNK_BYTES))
        warmed = -1  # the last task warmed
        while True:
            with self._changed:
                target = self._upcoming()
                while not self._closed and (target is None or target <= warmed):
                    self._changed.wait()
                    target = self._upcoming()
                if self._closed:
                    return

            def stop(target: int = target) -> bool:
                return self._closed or self._reached >= target  # the loop reads that task itself by now

            for reader, name in self._wanted[target]:
                reader.warm(name, scratch, stop)
            warmed = target
