"""Short blocking calls (Hub requests, header reads, checks, probes) awaited on the Qt loop through qasync.

`run_blocking(function, *args)` is an awaitable: the call runs on a small thread pool while the window keeps
responding, and the code after `await` runs on the UI thread, so it may touch widgets. `LatestTask` runs page
coroutines of which only the newest may finish: a newer request, `cancel()`, or the deletion of its owner
cancels the older one at its `await`, which is how search-as-you-type and live checks drop stale answers and how
a page deleted while a check runs is never touched again. The job runner's threads stay for heavy work.

`run_app` runs the window on a qasync loop; when the window runs under Qt's own loop instead (tests drive it
with pytest-qt), a qasync loop that is not "running" is made on first use: its callbacks still run whenever Qt
processes events. Coroutines here therefore await only futures (no `asyncio.sleep`, which needs a running loop).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import sys
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import qasync
from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QApplication
from shiboken6 import isValid

T = TypeVar("T")

_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="mergesmith-ui")
_pending: set[asyncio.Task] = set()  # tasks not finished yet (kept referenced: the loop holds them weakly)
_fallback_loop: asyncio.AbstractEventLoop | None = None


def ui_loop() -> asyncio.AbstractEventLoop:
    """The qasync loop the window's coroutines run on (see the module's docstring)."""
    global _fallback_loop
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    if _fallback_loop is None:
        _fallback_loop = qasync.QEventLoop(QApplication.instance())
        atexit.register(_close_fallback_loop)  # while Qt is still there: closing it later fails noisily
    return _fallback_loop


def _close_fallback_loop() -> None:
    if _fallback_loop is not None and not _fallback_loop.is_closed():
        with contextlib.suppress(RuntimeError):  # Qt already gone: nothing left to release
            _fallback_loop.close()


async def run_blocking(function: Callable[..., T], *args: Any) -> T:
    """Await `function(*args)` run on a worker thread; raises what it raises."""
    return await _submit(function, *args)


def _submit(function: Callable[..., T], *args: Any) -> asyncio.Future:
    """Start `function(*args)` on a worker thread now; its answer as a future of the UI loop."""
    # Not loop.run_in_executor: qasync's wraps the future for asyncio's current loop, which is not this one when
    # the window runs under Qt's own loop.
    return asyncio.wrap_future(_POOL.submit(functools.partial(function, *args)), loop=ui_loop())


def start(coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task:
    """Run `coroutine` on the UI loop. An exception it lets out is a bug: it goes to `sys.excepthook` (the
    window shows it as "Something went wrong"), never silently into asyncio's log."""
    task = ui_loop().create_task(coroutine)
    _pending.add(task)
    task.add_done_callback(_finished)
    return task


def _finished(task: asyncio.Task) -> None:
    _pending.discard(task)
    if not task.cancelled() and task.exception() is not None:
        error = task.exception()
        sys.excepthook(type(error), error, error.__traceback__)


def call_in_background(function: Callable[[], Any], on_result: Callable[[Any], None],
                       on_error: Callable[[BaseException], None] | None = None) -> asyncio.Task:
    """Run `function()` on a worker thread (starting now, even if the loop stops before it answers); call
    `on_result(value)` or `on_error(exc)` on the UI thread."""
    return start(_answer(_submit(function), on_result, on_error))


async def _answer(answer: Awaitable[Any], on_result: Callable[[Any], None],
                  on_error: Callable[[BaseException], None] | None) -> None:
    try:
        result = await answer
    except Exception as error:  # delivered to the caller, which explains it
        if on_error is not None:
            on_error(error)
        return
    on_result(result)


def _cancel_all(tasks: set[asyncio.Task]) -> None:
    """Cancel the tasks of an owner being deleted. When the app is quitting, the loop's own Qt timer may already be
    gone, and cancelling (which schedules the task once more) raises RuntimeError: the loop will run nothing else
    anyway, so there is nothing to cancel."""
    for task in list(tasks):
        try:
            task.cancel()
        except RuntimeError:  # "Internal C++ object (_SimpleTimer) already deleted" while quitting
            return


class LatestTask(QObject):
    """Debounced coroutines of which only the newest runs to its end.

    `request(make)` (re)starts a `delay_ms` timer; when it fires, the coroutine `make()` starts. A newer request,
    `cancel()`, or the deletion of this object (it is a child of its page) cancels a coroutine still running, at
    the `await` it is waiting in: nothing after that `await` runs.
    """

    def __init__(self, delay_ms: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._make: Callable[[], Coroutine[Any, Any, Any]] | None = None
        self._task: asyncio.Task | None = None
        self._timer = QTimer(self, singleShot=True, interval=delay_ms)
        self._timer.timeout.connect(self._start)
        running = self._running = set()  # the tasks to cancel if this object is deleted (self is gone by then)
        self.destroyed.connect(lambda *_: _cancel_all(running))

    def request(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        self._cancel_running()
        self._make = make
        self._timer.start()

    def cancel(self) -> None:
        self._timer.stop()
        self._make = None
        self._cancel_running()

    @property
    def task(self) -> asyncio.Task | None:
        """The coroutine running now, if any."""
        return self._task if self._task is not None and not self._task.done() else None

    def _cancel_running(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _start(self) -> None:
        make, self._make = self._make, None
        if make is None or not isValid(self):
            return
        self._task = task = start(make())
        self._running.add(task)
        task.add_done_callback(self._running.discard)


class LatestCall(LatestTask):
    """`LatestTask` for plain blocking calls: `request(function, on_result, on_error)` runs `function()` on a
    worker thread and hands its answer to the callbacks on the UI thread, unless it became stale meanwhile."""

    def request(self, function: Callable[[], Any], on_result: Callable[[Any], None],  # type: ignore[override]
                on_error: Callable[[BaseException], None] | None = None) -> None:
        super().request(lambda: _answer(run_blocking(function), on_result, on_error))

