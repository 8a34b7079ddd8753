"""Running a few independent calls at once, each on one torch thread, for work a second OpenMP thread does not speed up.

A TIES or Breadcrumbs tensor streamed in blocks is ranked once per model: each model's block is compared with that
model's own bracket. On blocks of a million entries a second OpenMP thread per operation made the merge no faster
(a three-layer slice of a Mistral-7B-shaped TIES merge: 19.2 s with two, 18.6 s with one), while counting the two
models' blocks at once, one torch thread each, took it to 16.1 s: the models are independent, so the second core
works on the other model instead of on half of each operation. Mixing each merged block in two halves of its rows
at once, the same way, took it to 14.3-15.4 s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from guiapp.compute.devices import use_cpu_threads

# (function, items) -> [function(item) for item in items], the calls perhaps run at once (MergeContext.run_each)
RunEach = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]


def one_at_a_time(function: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """The RunEach without helper threads: [function(item) for item in items], in order, on the calling thread."""
    return [function(item) for item in items]


Item = TypeVar("Item")
Result = TypeVar("Result")


class HelperThreads:
    """Runs the calls of `run_each` up to `width` at a time: on the calling thread and on at most `most - 1` helper
    threads, each using one torch thread. `width` starts at 1 (one call at a time, on the caller) and may change
    between calls, as the cores other programs leave free change. Close it (or use it as a context manager) to end
    the helper threads."""

    def __init__(self, most: int) -> None:
        self.most = max(1, most)
        self.width = 1
        self._pool = ThreadPoolExecutor(self.most - 1, "mergesmith-helper", initializer=use_cpu_threads,
                                        initargs=(1,)) if self.most > 1 else None

    def run_each(self, function: Callable[[Item], Result], items: Sequence[Item]) -> list[Result]:
        """[function(item) for item in items], the items spread over up to `width` threads; the calls must not
        share state that one of them changes. When a call fails, its error is raised once every thread has ended
        its share (the caller's own first), so nothing still works on the items afterwards."""
        lanes = min(self.width, self.most, len(items))
        if lanes <= 1 or self._pool is None:
            return one_at_a_time(function, items)

        def run_lane(lane: int) -> list[Result]:
            return [function(item) for item in items[lane::lanes]]

        helpers = [self._pool.submit(run_lane, lane) for lane in range(1, lanes)]
        try:
            results_by_lane = [run_lane(0)]
        finally:
            for future in helpers:
                future.exception()  # wait for it, whether or not the caller's lane failed
        results_by_lane += [future.result() for future in helpers]
        results: list[Result] = [None] * len(items)  # type: ignore[list-item]
        for lane, lane_results in enumerate(results_by_lane):
            results[lane::lanes] = lane_results
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def __enter__(self) -> HelperThreads:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

