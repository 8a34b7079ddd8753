"""The Jobs page: the queue and the history (merges, extractions, downloads), and the selected job in full.

For the selected job: an overall progress bar, stage, current tensor, rate, ETA, elapsed, Cancel, its log,
Open output folder, and after a failure or a cancel the explanation with its fixes as buttons (Retry, Retry with
the suggested settings, Choose another folder…, Sign in…, Use offline mode, Replace <folder>).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QListView,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.fixes import CHOOSE_FOLDER, GO_ONLINE, SIGN_IN, USE_OFFLINE, FixAction
from guiapp.jobs.runner import JobStatus
from guiapp.jobs.specs import job_kind
from guiapp.ui.gguf_export_dialog import GgufExportButton
from guiapp.ui.job_list_model import KEY_ROLE, STATUS_WORDS, JobListModel
from guiapp.ui.publish_dialog import PublishOutputButton
from guiapp.ui.theme import set_heading, set_status_style, status_colour
from guiapp.ui.widgets.explanation import ExplanationPanel
from guiapp.ui.widgets.job_chart import JobChart
from guiapp.ui.widgets.open_link import LinkFallback
from guiapp.ui.widgets.spectrum_chart import ModuleEnergyChart
from guiapp.ui.widgets.wrapping_label import WrappingLabel

STATUS_STYLE = {JobStatus.DONE: "good", JobStatus.FAILED: "problem", JobStatus.CANCELLED: "warning",
                JobStatus.INTERRUPTED: "warning"}
# A job that stopped keeps its bar where it stopped, in the warning colour; a failed job's bar is hidden (the
# explanation says what happened): neither looks like a finished job's full bar.
STOPPED_BAR = {JobStatus.CANCELLED: "warning", JobStatus.INTERRUPTED: "warning"}


class JobsPage(QWidget):
    retried = Signal(str)
    sign_in_requested = Signal()
    offline_requested = Signal(bool)  # True: work offline; False: go online

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.bridge = state.jobs
        self.selected: str | None = None

        self.jobs_model = JobListModel(self.bridge, self)
        self.list = QListView(accessibleName="Jobs")
        self.list.setModel(self.jobs_model)
        self.list.selectionModel().currentChanged.connect(self._selection_changed)
        self.clear_button = QPushButton("Clear finished")
        self.clear_button.setToolTip("Remove finished, failed and cancelled jobs from this list")
        self.clear_button.clicked.connect(self._clear_finished)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(QLabel("<b>Queue and history</b>"))
        left_layout.addWidget(self.list, 1)
        left_layout.addWidget(self.clear_button)

        self.title = WrappingLabel("No job selected.")
        set_heading(self.title, 1.2)
        self.status = WrappingLabel()
        self.bar = QProgressBar(accessibleName="Job progress")
        self.bar.setRange(0, 1000)
        self.bar.setFormat("%p%")
        self.stage, self.rate, self.eta, self.elapsed = (QLabel() for _ in range(4))
        self.item = WrappingLabel()
        facts = QFormLayout()
        for name, label in (("Stage", self.stage), ("Now", self.item), ("Rate", self.rate), ("Time left", self.eta),
                            ("Elapsed", self.elapsed)):
            facts.addRow(name, label)
        self.cancel_button = QPushButton("Cancel job")
        self.cancel_button.clicked.connect(self.cancel_selected)
        self.open_button = QPushButton("Open output folder")
        self.open_button.clicked.connect(self.open_output)
        self.publish_button = PublishOutputButton(state, self)
        self.gguf_button = GgufExportButton(state, self)
        buttons = QHBoxLayout()
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.publish_button)
        buttons.addWidget(self.gguf_button)
        buttons.addStretch()
        self.summary = WrappingLabel()
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open_fallback = LinkFallback()
        self.explanation = ExplanationPanel()
        self.explanation.action_requested.connect(self.perform_fix)
        self.folder_dialog: QFileDialog | None = None  # open while the user chooses another output folder
        self.log = QPlainTextEdit(readOnly=True, accessibleName="Job log")
        self.log.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.log.setMaximumBlockCount(2000)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.title, self.status, self.bar):
            right_layout.addWidget(widget)
        right_layout.addLayout(facts)
        right_layout.addLayout(buttons)
        right_layout.addWidget(self.open_fallback)
        right_layout.addWidget(self.summary)
        self.job_chart = JobChart(self.bridge)  # throughput over time; the estimate against the actual time
        right_layout.addWidget(self.job_chart)
        self.energy_chart = ModuleEnergyChart(height=130, shrinks=True)  # an extraction's change kept per module, worst in red
        right_layout.addWidget(self.energy_chart)
        right_layout.addWidget(self.explanation)
        right_layout.addWidget(QLabel("<b>Log</b>"))
        right_layout.addWidget(self.log, 1)

        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)

        self._clock = QTimer(self, interval=1000)
        self._clock.timeout.connect(self._tick)
        self._clock.start()
        self.bridge.record_added.connect(self.select)
        self.bridge.record_changed.connect(self._record_changed)
        self.bridge.progress.connect(self._progress)
        self.bridge.log_line.connect(self._log_line)
        if self.jobs_model.rowCount():
            self.list.setCurrentIndex(self.jobs_model.index(0))
        self._show_selected()

    # --- list ----------------------------------------------------------------------------------------------

    def _record_changed(self, key: str) -> None:
        if key == self.selected:
            self._show_selected()

    def _selection_changed(self, current, _previous=None) -> None:
        self.selected = current.data(KEY_ROLE) if current.isValid() else None
        self._show_selected()

    def select(self, key: str) -> None:
        index = self.jobs_model.row_of(key)
        if index.isValid():
            self.list.setCurrentIndex(index)

    def _clear_finished(self) -> None:
        selected = self.selected
        self.bridge.clear_finished()
        self.jobs_model.reload()  # the view's selection goes with the rows: a job still listed is selected again
        self.selected = None
        if selected is not None:
            self.select(selected)
        self._show_selected()

    # --- the selected job ------------------------------------------------------------------------------------

    def _show_selected(self) -> None:
        record = self.bridge.record(self.selected) if self.selected else None
        has = record is not None
        for widget in (self.bar, self.cancel_button, self.open_button, self.log):
            widget.setEnabled(has)
        self.publish_button.show_record(record)
        self.gguf_button.show_record(record)
        self.job_chart.show_record(record)
        self.energy_chart.show_summary(record.summary if has else None)  # hidden without per-module energies
        if not has:
            self.title.setText("No job selected." if self.jobs_model.rowCount() else
                               "No jobs yet. Run a merge or an extraction and it appears here.")
            for label in (self.status, self.stage, self.item, self.rate, self.eta, self.elapsed, self.summary):
                label.clear()
            self.bar.setValue(0)
            self._show_bar(None)
            self.log.clear()
            self.explanation.show_explanation(None, "")
            self.open_fallback.hide_address()
            return
        self.title.setText(record.title)
        self.status.setText(STATUS_WORDS.get(record.status, record.status))
        set_status_style(self.status, STATUS_STYLE.get(record.status))
        active = record.status.active
        self.cancel_button.setEnabled(active)
        self.open_button.setEnabled(bool(record.output) and record.status == JobStatus.DONE)
        if record.key in self.bridge.latest:  # this job's own last step, not the one shown before
            self._progress(record.key, self.bridge.latest[record.key])
        else:  # from the history: where it ended, when known
            self.bar.setValue(int((record.last_fraction or 0.0) * 1000))
            for label in (self.stage, self.item, self.rate, self.eta):
                label.clear()
            self.stage.setText(record.last_stage)
        if record.status == JobStatus.DONE:  # its last report may have been a step before the end
            self.bar.setValue(1000)
            self.stage.setText("Finished")
            self.item.clear()
        if not active:
            self.rate.clear()
            self.eta.clear()
        self._show_bar(record.status)
        self._tick()
        self.summary.setText(summary_text(record))
        self.explanation.show_explanation(record.explanation, record.status, record.output)
        self.open_fallback.hide_address()
        self.log.setPlainText("\n".join(record.log))
        self.log.verticalScrollBar().setValue(self.log.verticalScrollBar().maximum())

    def _show_bar(self, status: str | None) -> None:
        """The bar of a failed job is hidden; a stopped one keeps its value in the warning colour."""
        self.bar.setVisible(status != JobStatus.FAILED)
        palette = QPalette(QGuiApplication.palette())
        if status in STOPPED_BAR:
            palette.setColor(QPalette.ColorRole.Highlight, status_colour(STOPPED_BAR[status]))
        self.bar.setPalette(palette)
        self.bar.setFormat(f"{STATUS_WORDS[status]} at %p%" if status in STOPPED_BAR else "%p%")

    def _progress(self, key: str, event) -> None:
        if key != self.selected:
            return
        self.bar.setValue(int(event.fraction * 1000))
        # "(1 of 1)" says nothing (and read as the whole job's count for a job over several models).
        self.stage.setText(f"{event.stage} ({event.done} of {event.total})" if event.total > 1 else event.stage)
        self.item.setText(event.item)
        self.rate.setText(f"{event.rate / 1e6:.1f} MB/s" if event.rate else "")
        # Rounded up: "0 s" only when nothing is left; with work to go and nothing measured yet, say so.
        counts = event.total or event.bytes_total or event.work_total
        unknown = "not known yet" if counts and event.fraction < 1.0 else ""
        self.eta.setText(_duration(math.ceil(event.eta)) if event.eta is not None else unknown)

    def _log_line(self, key: str, line: str) -> None:
        if key == self.selected:
            self.log.appendPlainText(line)

    def _tick(self) -> None:
        record = self.bridge.record(self.selected) if self.selected else None
        if record is None or record.started is None:
            self.elapsed.setText("")
            return
        end = record.finished or time.time()
        self.elapsed.setText(_duration(end - record.started))

    # --- actions -------------------------------------------------------------------------------------------

    def cancel_selected(self) -> None:
        if self.selected:
            self.bridge.cancel(self.selected)
            self.status.setText("Cancelling… (stops after the current tensor)")

    def open_output(self) -> None:
        """Open the job's output folder in the file manager; without one, show the path to copy."""
        record = self.bridge.record(self.selected) if self.selected else None
        if record and record.output and Path(record.output).exists():
            self.open_fallback.open(QUrl.fromLocalFile(str(record.output)), "folders")

    def perform_fix(self, action: FixAction) -> None:
        """Do what an explanation's button offers for the selected job (see `guiapp.jobs.fixes`)."""
        if action.action == CHOOSE_FOLDER:
            self.choose_output_folder()
        elif action.action == SIGN_IN:
            self.sign_in_requested.emit()
        elif action.action in (USE_OFFLINE, GO_ONLINE):
            self.offline_requested.emit(action.action == USE_OFFLINE)
        else:  # the retries: as it was, with the suggested settings, or replacing the existing output
            self.retry_selected(action.changes)

    def choose_output_folder(self) -> None:
        """Ask where to write instead; the job then runs again there, under its own name (made unique)."""
        record = self.bridge.record(self.selected) if self.selected else None
        if record is None or not record.output:
            return
        output = Path(record.output)
        dialog = QFileDialog(self, "Choose where to write it", str(output.parent))
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(lambda folder: self._retry_in(folder, output.name))
        dialog.finished.connect(lambda _: setattr(self, "folder_dialog", None))
        self.folder_dialog = dialog
        dialog.open()

    def _retry_in(self, folder: str, name: str) -> None:
        from guiapp.jobs.naming import default_output

        self.retry_selected({"output": str(default_output(folder, name))})

    def retry_selected(self, changes: dict | None = None) -> None:
        """Run the selected job again with `changes` to its settings (None: its explanation's suggestion)."""
        from guiapp.errors import MergesmithError

        try:
            record = self.bridge.retry(self.selected, changes)
        except MergesmithError as error:
            self.status.setText(f"Cannot retry: {error.message}")
            set_status_style(self.status, "problem")
            return
        self.retried.emit(record.key)


def summary_text(record) -> str:
    """What a finished job produced, in a sentence or two (the extraction report included)."""
    if record.status != JobStatus.DONE or not record.summary:
        return ""
    return job_kind(record.kind).summary(record.summary)


def _duration(seconds: float) -> str:
    from guiapp.system.units import format_seconds

    return format_seconds(max(0.0, seconds))
