"""Running short blocking calls (Hub requests, header reads, plans, probes) off the UI thread.

The call runs on a small thread pool; its result or exception comes back to the UI thread through a queued
signal, so callbacks may touch widgets. `LatestCall` keeps only the newest request's answer, which is how
search-as-you-type and live validation drop stale results.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from shiboken6 import isValid

_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="mergesmith-ui")
_pending: set[_Relay] = set()  # keeps each relay alive until its answer is delivered


class _Relay(QObject):
    answered = Signal(object, object)  # result, error


def call_in_background(function: Callable[[], Any], on_result: Callable[[Any], None],
                       on_error: Callable[[BaseException], None] | None = None) -> None:
    """Run `function()` on a worker thread; call `on_result(value)` or `on_error(exc)` on the UI thread."""
    relay = _Relay()
    _pending.add(relay)

    def deliver(result: Any, error: BaseException | None) -> None:
        _pending.discard(relay)
        if error is None:
            on_result(result)
        elif on_error is not None:
            on_error(error)

    relay.answered.connect(deliver, Qt.ConnectionType.QueuedConnection)

    def run() -> None:
        try:
            result, error = function(), None
        except Exception as failure:  # delivered to the page, which explains it
            result, error = None, failure
        relay.answered.emit(result, error)

    _POOL.submit(run)


class LatestCall(QObject):
    """Debounced background calls of which only the newest is answered.

    `request(function, on_result, on_error)` (re)starts a `delay_ms` timer; when it fires the call starts, and
    an answer arriving after a newer request was made, or after this object was deleted with its page, is dropped.
    """

    def __init__(self, delay_ms: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._generation = 0
        self._next: tuple | None = None
        self._timer = QTimer(self, singleShot=True, interval=delay_ms)
        self._timer.timeout.connect(self._start)

    def request(self, function: Callable[[], Any], on_result: Callable[[Any], None],
                on_error: Callable[[BaseException], None] | None = None) -> None:
        self._generation += 1
        self._next = (self._generation, function, on_result, on_error)
        self._timer.start()

    def cancel(self) -> None:
        self._generation += 1
        self._timer.stop()

    def _start(self) -> None:
        if self._next is None:
            return
        generation, function, on_result, on_error = self._next
        self._next = None

        def answered(callback, value) -> None:
            # The page that asked may be gone (the window closed while the call ran): its answer is dropped.
            if isValid(self) and generation == self._generation:
                if callback is not None:
                    callback(value)

        call_in_background(function, lambda value: answered(on_result, value),
                           lambda error: answered(on_error, error))
