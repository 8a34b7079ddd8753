"""The Lab page: search the numbers of a recipe (the Merge page's, or a file's) for the merge with the lowest
perplexity on the user's text, watch the trials come in on a chart, take the best recipe back to Merge, or try it
beside the recipe as given on the Try page.

The search runs as a job (guiapp.jobs.lab) in a folder of its own: cancelling keeps every finished trial, and
starting again with the same folder and settings continues where it stopped. "Try it" merges the two recipes into
folders of the lab's (jobs on the Jobs page; a folder already holding that recipe's merge is reused).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.lab import tunable_words
from guiapp.jobs.runner import JobStatus
from guiapp.ui.lab.search_form import SearchForm, read_only_cell
from guiapp.ui.text import error_text
from guiapp.ui.widgets.charts import ChartHost, pyqtgraph
from guiapp.ui.widgets.wrapping_label import WrappingLabel

CHART_HEIGHT = 200
BEST_SHOWN = 5


class LabChart(ChartHost):
    """Perplexity per trial (dots; failed trials leave a gap), the best so far (a step line) and the recipe as
    given (a dashed line)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(CHART_HEIGHT, parent)
        self.setAccessibleName("Perplexity per trial")
        self.trials: dict[int, float | None] = {}

    def configure(self) -> None:
        self.plot.setLabel("bottom", "trial")
        self.plot.setLabel("left", "perplexity")
        self.dots = self.plot.plot([], [], pen=None, symbol="o", symbolSize=7)
        self.best = self.plot.plot([], [], stepMode=None)
        self.start_line: Any = None

    def redraw(self) -> None:
        pg = pyqtgraph()
        done = sorted((i, p) for i, p in self.trials.items() if p is not None and math.isfinite(p))
        self.dots.setData([i for i, _ in done], [p for _, p in done])
        self.dots.setSymbolBrush(pg.mkBrush(self.series_colour(0)))
        self.dots.setSymbolPen(pg.mkPen(self.series_colour(0)))
        lowest, steps = math.inf, []
        for index, value in done:
            lowest = min(lowest, value)
            steps.append((index, lowest))
        self.best.setData([i for i, _ in steps], [v for _, v in steps])
        self.best.setPen(pg.mkPen(self.series_colour(1), width=2))
        if self.start_line is not None:
            self.plot.removeItem(self.start_line)
            self.start_line = None
        start = self.trials.get(0)
        if start is not None:
            self.start_line = pg.InfiniteLine(start, angle=0, pen=pg.mkPen(self.text_colour(), width=1,
                                                                           style=Qt.PenStyle.DashLine))
            self.plot.addItem(self.start_line)

    def add(self, index: int, value: float | None) -> None:
        self.trials[index] = value
        self.refresh()

    def clear(self) -> None:
        self.trials = {}
        self.refresh()


class LabPage(QWidget):
    """The form (recipe, text, numbers to tune, trials, where), the race (chart, best candidates), Start/Cancel,
    "Use this recipe" and "Try it"."""

    use_recipe = Signal(dict)  # the best candidate's recipe, for the Merge page
    try_models = Signal(list)  # the folders of the recipe as given and of the best candidate, for the Try page
    _trial_heard = Signal(object)  # a TrialRecord, from the job's thread

    def __init__(self, state, merge_page, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._key: str | None = None
        self._records: dict[int, Any] = {}
        self._lab_folder: Path | None = None  # the folder of the search the chart shows
        # The recipe and numbers of that search: the form may show another recipe since (the Merge page's, changed).
        self._searched: tuple[dict[str, Any], list[Any]] | None = None
        self._words: dict[str, str] = {}  # a tuned number's recipe name -> the window's words for it
        self._try_keys: set[str] = set()  # the merges "Try it" waits for
        self._try_folders: list[str] = []

        self.form = SearchForm(merge_page.form_document)  # what to search: the Merge page's recipe, or a file's

        self.start_button = QPushButton("Start the search")
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel", enabled=False)
        self.cancel_button.clicked.connect(self.cancel)
        self.use_button = QPushButton("Use this recipe", enabled=False)
        self.use_button.setToolTip("Load the best recipe found into the Merge page")
        self.use_button.clicked.connect(self._use_best)
        self.try_button = QPushButton("Try it", enabled=False)
        self.try_button.setToolTip("Merge the best recipe and the recipe as given into the lab's folder and compare "
                                   "them on the Try page")
        self.try_button.clicked.connect(self.try_best)
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        buttons.addWidget(self.use_button)
        buttons.addWidget(self.try_button)

        self.chart = LabChart()
        self.best_table = QTableWidget(0, 3, accessibleName="Best candidates")
        self.best_table.setHorizontalHeaderLabels(["Trial", "Perplexity", "Values"])
        self.best_table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.best_table.verticalHeader().hide()
        self.best_table.setMaximumHeight(200)
        self.status = WrappingLabel("Choose a text, then start the search.")
        self.form.problem.connect(self.status.setText)

        content = QWidget()
        scroll = QScrollArea(widgetResizable=True)  # the window's minimum size stays the other pages'
        scroll.setWidget(content)
        QVBoxLayout(self).addWidget(scroll)
        layout = QVBoxLayout(content)
        layout.addWidget(self.form)
        layout.addLayout(buttons)
        layout.addWidget(self.chart)
        layout.addWidget(QLabel("Dots: each trial's perplexity (lower is better). Line: the best so far. Dashed: the "
                                "recipe as given."))
        layout.addWidget(self.best_table)
        layout.addWidget(self.status)
        layout.addStretch(1)

        self._trial_heard.connect(self._show_trial, Qt.ConnectionType.QueuedConnection)
        state.jobs.record_changed.connect(self._job_changed)
        state.jobs.progress.connect(self._job_progress)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if self.form.follows_merge_page() and self._key is None:
            self.form.use_merge_recipe()
        super().showEvent(event)

    # --- running ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Write the recipe into the lab folder and start the search job there (one already there continues)."""
        from guiapp.jobs.lab import lab_job, write_recipe

        form = self.form
        if not form.tunables:
            self.status.setText("This recipe has no number to tune: give its models weights (or the method's "
                                "other numbers) on the Merge page first.")
            return
        if not form.text_path.text().strip():
            self.status.setText("Choose the text file the merge should be good at first.")
            return
        tune = form.tune()
        if not tune:
            self.status.setText("Tick at least one number to tune.")
            return
        folder = form.lab_folder()
        recipe = folder.with_name(folder.name + " recipe.yml")
        try:
            write_recipe(form.document, recipe)
        except OSError as error:
            self.status.setText(f"The lab cannot write {recipe}: {error.strerror or error}.")
            return
        spec = form.spec(recipe, tune)
        self._records = {}
        self._lab_folder = folder
        self._searched = (form.document, list(form.tunables))
        self._words = {tunable.name: tunable_words(form.document, tunable) for tunable in form.tunables}
        self.chart.clear()
        self.best_table.setRowCount(0)
        self.use_button.setEnabled(False)
        self.try_button.setEnabled(False)
        self._key = self.state.jobs.submit(lab_job(spec, on_trial=self._trial_heard.emit)).key
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.status.setText("Starting…")

    def cancel(self) -> None:
        if self._key is not None:
            self.state.jobs.cancel(self._key)
            self.status.setText("Cancelling: the trials finished so far are kept.")

    def _show_trial(self, record) -> None:
        self._records[record.index] = record
        self.chart.add(record.index, record.perplexity)
        done = sorted((r for r in self._records.values() if r.succeeded), key=lambda r: (r.loss, r.index))
        self.best_table.setRowCount(min(BEST_SHOWN, len(done)))
        for row, best in enumerate(done[:BEST_SHOWN]):
            label = "start" if best.index == 0 else str(best.index)
            values = "; ".join(f"{self._words.get(name, name)} {value:.3g}" for name, value in best.values.items())
            for column, text in enumerate((label, f"{best.perplexity:.3f}", values)):
                self.best_table.setItem(row, column, read_only_cell(text))
        self.use_button.setEnabled(bool(done))

    def _job_progress(self, key: str, event) -> None:
        if key == self._key:
            counted = f" ({event.done} of {event.total})" if event.total else ""
            self.status.setText(f"{event.stage}{counted}")

    def _job_changed(self, key: str) -> None:
        record = self.state.jobs.record(key)
        if record is None or record.status.active:
            return
        if key in self._try_keys:
            self._try_merge_ended(key, record)
            return
        if key != self._key:
            return
        self._key = None
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.try_button.setEnabled(self._best() is not None)
        if record.status == JobStatus.DONE:
            summary = record.summary
            self.status.setText(f"Best perplexity {summary['best_perplexity']:.3f} (the recipe as given: "
                                f"{summary['start_perplexity']:.3f}). The best recipe is {summary['best_recipe']}.")
        elif record.status == JobStatus.CANCELLED:
            self.status.setText("Cancelled. The trials so far are kept: start again with the same folder to go on.")
        else:
            explanation = record.explanation or {}
            self.status.setText(explanation.get("what") or "The search stopped; the Jobs page says why.")

    def _best(self) -> dict[str, Any] | None:
        """The recipe of the best trial so far, None before any trial succeeded."""
        from guiapp.jobs.lab import recipe_with_values

        done = [r for r in self._records.values() if r.succeeded]
        if not done or self._searched is None:
            return None
        best = min(done, key=lambda r: (r.loss, r.index))
        return recipe_with_values(*self._searched, best.values)

    def _use_best(self) -> None:
        best = self._best()
        if best is not None:
            self.use_recipe.emit(best)

    def try_best(self) -> None:
        """Merge the recipe as given and the best one into the lab's folder (reusing merges already there), then
        hand both to the Try page."""
        from guiapp.errors import MergesmithError
        from guiapp.jobs.lab_try import try_merges

        best = self._best()
        if best is None or self._lab_folder is None or self._key is not None:
            return
        try:
            merges = try_merges(self._searched[0], best, self._lab_folder)
        except MergesmithError as error:
            self.status.setText(error_text(error))
            return
        self._try_folders = [str(merge.folder) for merge in merges]
        self._try_keys = {self.state.jobs.submit(merge.job).key for merge in merges if merge.job is not None}
        if not self._try_keys:
            self.try_models.emit(self._try_folders)
            return
        self.try_button.setEnabled(False)
        self.start_button.setEnabled(False)
        self.status.setText(f"Merging {'both recipes' if len(self._try_keys) > 1 else 'the best recipe'} into "
                            f"{self._lab_folder} to try them (the Jobs page shows the progress)…")

    def _try_merge_ended(self, key: str, record) -> None:
        self._try_keys.discard(key)
        if record.status != JobStatus.DONE:
            for other in self._try_keys:
                self.state.jobs.cancel(other)
            self._try_keys.clear()
            explanation = record.explanation or {}
            self.status.setText(" ".join(filter(None, (explanation.get("what"), explanation.get("fix")))) or
                                "A merge to try stopped; the Jobs page says why.")
        elif not self._try_keys:
            self.status.setText("Both models are on the Try page: the recipe as given first, the best one second.")
            self.try_models.emit(self._try_folders)
        if not self._try_keys:
            self.try_button.setEnabled(True)
            self.start_button.setEnabled(True)
