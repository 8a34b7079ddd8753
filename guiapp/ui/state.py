"""What every page shares: the job bridge, the live model library, and the slow things loaded after the window is
shown.

The merge methods' declarations (`declarations`: names, groups, parameters) are torch-free and read at once, so
the Merge page is ready for input as soon as the window shows. The methods themselves (their merge functions: the
engine) import torch (seconds) and the capability probe may run a child process the first time, so both load on
a worker thread once the window is visible; what needs them (a recipe's check, the estimate) waits for
`methods_ready` and `probe_ready` (or reads `methods` / `probe` when they are already there).
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from guiapp.jobs.merge_choices import merge_method_declarations
from guiapp.jobs.runner import JobStatus
from guiapp.jobs.specs import job_kind
from guiapp.ui.background import call_in_background
from guiapp.ui.job_bridge import JobBridge
from guiapp.ui.library_model import LibraryModel


class AppState(QObject):
    methods_ready = Signal(object)  # dict name -> MergeMethod: the engine is loaded
    probe_ready = Signal(object)  # ProbeResult
    methods_failed = Signal(object)  # the exception: the engine (torch) could not be loaded
    probe_failed = Signal(object)  # the exception
    # Cross-page requests from the Models page and the welcome: a model reference for a form.
    use_as_base = Signal(str)
    add_to_merge = Signal(str)
    extract_from = Signal(str, str)  # fine-tune, its base when known (else "")
    # What the forms' checks read besides the form changed: a job ended (its output folder now exists, or its lock
    # is gone) or the library was read again. Every page showing a check checks again.
    checks_outdated = Signal()

    def __init__(self, parent: QObject | None = None, *, keep_history: bool = True) -> None:
        super().__init__(parent)
        self.jobs = JobBridge(self, keep_history=keep_history)
        self.library = LibraryModel(self.finished_outputs, self)
        self.jobs.record_changed.connect(self._job_changed)
        self.library.refreshed.connect(self.checks_outdated)
        self.library.refresh()
        self.declarations: dict[str, Any] = merge_method_declarations()  # name -> MethodDeclaration
        self.methods: dict[str, Any] | None = None
        self.probe: Any = None
        self.probing = False
        self._probe_after_methods = True

    def finished_outputs(self) -> list[str]:
        """The folders finished merges, extractions and applications wrote, newest first."""
        return [record.output for record in reversed(self.jobs.records)
                if job_kind(record.kind).makes_model and record.status == JobStatus.DONE and record.output]

    def add_folders(self, folders: list[str]) -> None:
        """Add model `folders` to the library (as local folders, kept across restarts) off the UI thread; one
        that holds no model is skipped."""

        def add() -> None:
            from guiapp.errors import MergesmithError
            from guiapp.jobs.library import add_local_folder

            for folder in folders:
                try:
                    add_local_folder(Path(folder))
                except MergesmithError:
                    pass  # not a model folder: nothing to list

        call_in_background(add, lambda _: self.library.refresh())

    def _job_changed(self, key: str) -> None:
        record = self.jobs.record(key)
        if record is None or record.status.active:
            return
        self.checks_outdated.emit()
        if job_kind(record.kind).changes_disk and record.status == JobStatus.DONE:
            self.library.refresh()

    def start_loading(self, probe: bool = True) -> None:
        """Load the method registry (torch) and the chart library, then (with `probe`) this machine's probe result,
        off the UI thread."""
        self._probe_after_methods = probe
        call_in_background(_load_methods, self._methods_loaded, self._methods_failed)

    def reprobe(self, refresh: bool = True) -> None:
        if self.probing:
            return
        self.probing = True

        def run():
            from guiapp.system.probe import probe

            return probe(refresh=refresh)

        call_in_background(run, self._probed, self._probe_failed)

    def _methods_loaded(self, methods: dict[str, Any]) -> None:
        _spare_the_ui_thread_full_collections()
        self.methods = methods
        self.methods_ready.emit(methods)
        if self._probe_after_methods:
            self.reprobe(refresh=False)

    def _methods_failed(self, error: BaseException) -> None:
        self.methods_failed.emit(error)

    def _probed(self, result: Any) -> None:
        self.probing = False
        self.set_probe(result)

    def _probe_failed(self, error: BaseException) -> None:
        self.probing = False
        self.probe_failed.emit(error)

    def set_probe(self, result: Any) -> None:
        """Use `result` as this machine's capability matrix (also how tests hand in a probe they built)."""
        self.probe = result
        self.probe_ready.emit(result)


def _spare_the_ui_thread_full_collections() -> None:
    """Take what is alive once the engine has loaded (torch, the engine, the window: about 200,000 objects that
    live as long as the process) out of the garbage collector's sight, once per process. Each full collection
    walked them all on whatever thread allocated at that moment, often the UI thread: about 90 ms at a time."""
    if gc.get_freeze_count() == 0:
        gc.freeze()


def _load_methods() -> dict[str, Any]:
    from guiapp.jobs.merge_choices import load_merge_methods  # imports torch: never on the UI thread
    from guiapp.ui.widgets.charts import import_what_charts_need

    methods = load_merge_methods()
    import_what_charts_need()
    return methods
