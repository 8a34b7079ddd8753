"""The window collects Python's cyclic garbage on the UI thread, between events (guiapp.ui.garbage): a Qt object
caught in a reference cycle is never deleted by a worker thread's allocations, nor while the window paints it."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import weakref

from PySide6.QtWidgets import QApplication, QWidget

from guiapp.ui.garbage import ui_thread_collector

# A chart on screen, left in a reference cycle (its own attribute refers to it), becomes garbage just before the
# window paints it, with the collection due at every allocation: the interpreter's own collection deletes it while
# its plot paints, which crashed the process.
_CHART_IN_A_CYCLE = textwrap.dedent("""
    import gc, os, sys, time
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from guiapp.ui.app import create_window
    app, window = create_window([])
    from guiapp.ui.widgets.job_chart import ThroughputChart

    def shown_chart_in_a_cycle():
        chart = ThroughputChart()
        chart.ensure_plot()
        chart.show_job([(float(t), 10.0) for t in range(5)], None, None)
        chart.on_screen = lambda: chart.isVisible()
        chart.show()
        return weakref.ref(chart)

    import weakref
    for _ in range(3):
        automatic = gc.isenabled()
        gc.disable()
        chart = shown_chart_in_a_cycle()
        gc.set_threshold(1)
        if automatic:
            gc.enable()
        app.processEvents()  # the first paint, with nothing allocated since the chart became garbage
        end = time.monotonic() + 3
        while chart() is not None and time.monotonic() < end:
            app.processEvents()
        gc.set_threshold(700, 10, 10)
        assert chart() is None, "the chart was never collected"
    print("collected three charts")
""")


def test_a_chart_collected_while_the_window_paints_it_does_not_crash_the_app():
    result = subprocess.run([sys.executable, "-c", _CHART_IN_A_CYCLE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "collected three charts" in result.stdout, (result.returncode, result.stderr)


def test_a_widget_in_a_cycle_is_deleted_on_the_ui_thread_not_by_a_worker_threads_allocations(make_window, qtbot):
    app = QApplication.instance()
    ui_thread_collector(app).stop()  # as before any window: the interpreter collects
    assert gc.isenabled()
    make_window()
    assert not gc.isenabled()  # the window took the collection over
    deleted_on = []

    def widget_in_a_cycle() -> None:
        widget = QWidget()
        widget.me = widget
        weakref.finalize(widget, lambda: deleted_on.append(threading.current_thread()))

    widget_in_a_cycle()

    def allocate() -> None:  # what a job's thread does: many objects, some of them in cycles
        for _ in range(50_000):
            cycle: list = []
            cycle.append(cycle)

    worker = threading.Thread(target=allocate)
    worker.start()
    worker.join()
    assert deleted_on == []
    qtbot.waitUntil(lambda: bool(deleted_on), timeout=5_000)  # the collector's next turn
    assert deleted_on == [threading.main_thread()]


def test_what_a_jobs_thread_left_in_a_cycle_goes_when_the_job_ends(qtbot, tmp_path, monkeypatch):
    """Cycles a job's thread made and dropped are freed when the window hears the job has ended, on the UI thread,
    not at the collector's next full pass (a minute or more away once they have aged)."""
    from guiapp.jobs.runner import Job
    from guiapp.ui.job_bridge import JobBridge

    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(tmp_path / "config"))
    freed = []
    handed = [_Held([bytearray(1 << 20)])]
    weakref.finalize(handed[0], lambda: freed.append(threading.current_thread()))
    gc.collect(1)  # aged into the oldest generation, as what a long job holds is by its end

    def work(progress) -> dict:
        handed.clear()  # the job drops the last reference: garbage, in a cycle
        return {}

    bridge = JobBridge(keep_history=False)
    key = bridge.submit(Job("Leaves a cycle", "merge", {}, work)).key
    qtbot.waitUntil(lambda: not bridge.record(key).status.active, timeout=30_000)
    assert freed == [threading.main_thread()]
    bridge.shutdown(10)


class _Held:
    """An object in a reference cycle with the list it holds."""

    def __init__(self, cycle: list) -> None:
        self.cycle = cycle
        cycle.append(self)
