"""Python's cyclic garbage collected on the UI thread, between events, while the window runs.

Left to itself, the interpreter collects whenever enough objects have been allocated, on whichever thread
allocates them: a job's worker thread, or the UI thread in the middle of painting. A Qt object caught in a
reference cycle (a widget whose own callback refers to it) is then deleted right there, which Qt does not survive:
a chart left in a cycle and collected while the window painted it crashed the process. So the window turns the
automatic collection off and collects from a timer on the UI thread instead, as often as the interpreter would
(by its own thresholds), as pyqtgraph advises for its plots.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QApplication

_NAME = "mergesmith-garbage-collector"
INTERVAL_MS = 500  # cyclic garbage made on worker threads (a failed job's traceback and its tensors) waits this long


class UiThreadCollector(QObject):
    """Collects the generations whose thresholds were passed, each time its timer fires."""

    def __init__(self, app: QApplication) -> None:
        super().__init__(app)
        self.setObjectName(_NAME)
        self._timer = QTimer(self)
        self._timer.setInterval(INTERVAL_MS)
        self._timer.timeout.connect(self.collect_due)

    @property
    def active(self) -> bool:
        """Whether it has taken the collection over from the interpreter."""
        return self._timer.isActive()

    def start(self) -> None:
        gc.disable()
        self._timer.start()

    def stop(self) -> None:
        """Collect now and give the collection back to the interpreter."""
        self._timer.stop()
        gc.collect()
        gc.enable()

    def collect_due(self) -> None:
        counts, thresholds = gc.get_count(), gc.get_threshold()
        for generation in (2, 1, 0):  # the oldest due one: collecting it collects the younger ones too
            if counts[generation] > thresholds[generation]:
                gc.collect(generation)
                return


def collect_garbage_now() -> None:
    """A full collection, now; on the UI thread only. For when a job has ended: what its threads left in cycles (a
    failure's traceback, with the tensors its frames held) goes at once, not at the timer's next full collection,
    which comes after a hundred of the young generation's (a minute or more)."""
    gc.collect()


def ui_thread_collector(app: QApplication) -> UiThreadCollector | None:
    """`app`'s collector, once `collect_garbage_on_ui_thread` has made it."""
    return app.findChild(UiThreadCollector, _NAME)


def collect_garbage_on_ui_thread(app: QApplication) -> UiThreadCollector:
    """From now on collect cyclic garbage only from a timer on `app`'s (the UI) thread. Idempotent; call it on the UI
    thread."""
    collector = ui_thread_collector(app) or UiThreadCollector(app)
    collector.start()
    return collector
