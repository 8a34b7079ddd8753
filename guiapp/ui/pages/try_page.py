"""The Try page: one to four models side by side, generating from one prompt or scored on the user's text.

The models default to the inputs and the output of the job that just finished (a merge, an extraction, an
application). Generation and perplexity are jobs on the runner (they appear on the Jobs page too); their text
arrives here through a queued signal, a column per model, as it is decoded. Loaded models stay loaded between
runs when they fit together (the job decides, from their size, before loading).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from guiapp.facts.dtypes import WRITABLE
from guiapp.jobs.recipe_fixes import short_name
from guiapp.jobs.tryout import (
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    MAX_MODELS,
    ModelShelf,
    estimate_try_time,
    models_to_try,
    perplexity_job,
    publishable_folder,
    read_sample_text,
    try_job,
)
from guiapp.ui.background import LatestTask, call_in_background, run_blocking
from guiapp.ui.text import error_text, sentence
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.model_picker import ModelPicker
from guiapp.ui.widgets.options import OptionCombo, device_choices, dtype_choices
from guiapp.ui.widgets.wrapping_label import WrappingLabel

# A text to score longer than this (a whole file opened) is not kept for the next start: the models and the
# prompt are, and the file can be opened again.
REMEMBERED_TEXT_CHARS = 16_000
FINISHED_KINDS = ("merge", "extract", "apply")


class BarChart(QWidget):
    """Horizontal bars, one per model, labelled with the value: drawn with QPainter (no chart library)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: list[tuple[str, float]] = []
        self.caption = ""
        self.setMinimumHeight(120)

    def set_values(self, values: list[tuple[str, float]], caption: str) -> None:
        self.values, self.caption = values, caption
        self.setMinimumHeight(40 + 34 * len(values))
        self.update()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        painter.setPen(palette.color(QPalette.ColorRole.WindowText))
        metrics = painter.fontMetrics()
        painter.drawText(QRectF(0, 0, self.width(), 22), Qt.AlignmentFlag.AlignLeft, self.caption)
        if not self.values:
            return
        label_width = min(self.width() // 3, max(metrics.horizontalAdvance(label) for label, _ in self.values) + 16)
        value_width = metrics.horizontalAdvance("00000.000") + 12
        bar_space = max(10, self.width() - label_width - value_width)
        largest = max(value for _, value in self.values) or 1.0
        bar_colour = palette.color(QPalette.ColorRole.Highlight)
        for row, (label, value) in enumerate(self.values):
            top = 28 + row * 34
            shown = metrics.elidedText(label, Qt.TextElideMode.ElideLeft, label_width - 8)
            painter.drawText(QRectF(0, top, label_width - 8, 24), Qt.AlignmentFlag.AlignRight
                             | Qt.AlignmentFlag.AlignVCenter, shown)
            width = max(2.0, bar_space * value / largest)
            painter.fillRect(QRectF(label_width, top + 2, width, 20), QColor(bar_colour))
            painter.drawText(QRectF(label_width + width + 6, top, value_width, 24), Qt.AlignmentFlag.AlignVCenter,
                             f"{value:.3f}")
        painter.end()


class ModelColumn(QGroupBox):
    """One model's output: its name, what it runs in, and the text as it streams in."""

    def __init__(self, reference: str, parent: QWidget | None = None) -> None:
        super().__init__(short_name(reference), parent)
        self.setToolTip(reference)
        self.status = WrappingLabel("Waiting…")
        self.output = QPlainTextEdit(readOnly=True)
        self.output.setAccessibleName(f"Output of {reference}")
        layout = QVBoxLayout(self)
        layout.addWidget(self.status)
        layout.addWidget(self.output, 1)

    def append(self, text: str) -> None:
        cursor = self.output.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        cursor.insertText(text)
        self.output.setTextCursor(cursor)

    def text(self) -> str:
        return self.output.toPlainText()


class TryPage(QWidget):
    """Pick models, then Generate (columns) or Perplexity (table and bar chart); Stop cancels either."""

    _text_arrived = Signal(int, str)  # model index, text (emitted on the job's thread, handled on the UI thread)

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._shelf = ModelShelf()
        self._key: str | None = None
        self._mode = ""
        self.columns: list[ModelColumn] = []

        models_box = QGroupBox("Models to compare (one to four: a folder, a Hub id, or BASE+ADAPTER)")
        grid = QGridLayout(models_box)
        self.pickers = [ModelPicker() for _ in range(MAX_MODELS)]
        for index, picker in enumerate(self.pickers):
            grid.addWidget(QLabel(f"{index + 1}."), index // 2, (index % 2) * 2)
            grid.addWidget(picker, index // 2, (index % 2) * 2 + 1)
        self.device = OptionCombo()
        self.dtype = OptionCombo()
        self.device.choice_changed.connect(lambda _: self._refresh_capabilities())
        settings_row = QHBoxLayout()
        settings_row.addWidget(QLabel("Device"))
        settings_row.addWidget(self.device, 1)  # the spare room: a device's name is long ("CPU: …, 25.3 GB RAM")
        settings_row.addWidget(QLabel("Dtype"))
        settings_row.addWidget(self.dtype)
        self.publish_button = QPushButton("Publish the last model…")
        self.publish_button.setToolTip("Publish the last model of the list (a folder on this computer; for "
                                       "BASE+ADAPTER, the adapter) to the Hugging Face Hub")
        self.publish_button.clicked.connect(self.open_publish)
        settings_row.addWidget(self.publish_button)
        grid.addLayout(settings_row, 2, 0, 1, 4)

        self.tabs = QTabWidget()
        for build, title in ((self._build_generate, "Generate"), (self._build_perplexity, "Perplexity")):
            scroll = QScrollArea(widgetResizable=True)  # the window's minimum size stays the other pages'
            scroll.setWidget(build())
            self.tabs.addTab(scroll, title)
        self.status = WrappingLabel("")
        self.stop = QPushButton("Stop", enabled=False)
        self.stop.clicked.connect(self.stop_job)
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.stop)

        layout = QVBoxLayout(self)
        layout.addWidget(models_box)
        layout.addWidget(self.tabs, 1)
        layout.addLayout(status_row)

        self._text_arrived.connect(self._append_text, Qt.ConnectionType.QueuedConnection)
        state.probe_ready.connect(lambda _: self._refresh_capabilities())
        state.jobs.record_changed.connect(self._job_changed)
        state.jobs.progress.connect(self._job_progress)
        for picker in self.pickers:
            picker.use_library(state.library)
            picker.changed.connect(lambda _: self._models_changed())
        self._scored: list[str] = []  # the models the perplexity table is about
        self._hint: tuple[str, str] | None = None  # the action whose missing input the status names, and its text
        for edit in (self.prompt, self.text):
            edit.textChanged.connect(self._update_hint)
        # Each tab's time estimate, worked out in the background from the models' headers once the input settles.
        self._estimator = LatestTask(500, self)
        for signal in (*(picker.changed for picker in self.pickers), self.prompt.textChanged, self.text.textChanged,
                       self.max_new_tokens.valueChanged, self.tabs.currentChanged, self.dtype.choice_changed,
                       self.device.choice_changed):
            signal.connect(self._estimate_changed)
        self._refresh_capabilities()
        self._restore_form()

    # --- building -------------------------------------------------------------------------------------------

    def _build_generate(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        self.prompt = QPlainTextEdit(placeholderText="Write a prompt; each model answers it in its own column.")
        self.prompt.setMaximumHeight(90)
        column.addWidget(self.prompt)
        row = QHBoxLayout()
        self.decoding = QComboBox()
        self.decoding.addItem("Greedy (the likeliest token)", False)
        self.decoding.addItem("Sampled", True)
        self.seed = QSpinBox(minimum=0, maximum=2**31 - 1, value=0, prefix="Seed ")
        self.temperature = QDoubleSpinBox(minimum=0.05, maximum=2.0, singleStep=0.05, decimals=2,
                                          value=DEFAULT_TEMPERATURE, prefix="Temperature ")
        self.top_p = QDoubleSpinBox(minimum=0.05, maximum=1.0, singleStep=0.05, decimals=2, value=DEFAULT_TOP_P,
                                    prefix="Top-p ")
        self.decoding.currentIndexChanged.connect(self._decoding_changed)
        self._decoding_changed()
        self.max_new_tokens = QSpinBox(minimum=1, maximum=8192, value=128, suffix=" new tokens at most")
        self.generate_button = QPushButton("Generate")
        self.generate_button.clicked.connect(self.generate)
        for widget in (self.decoding, self.seed, self.temperature, self.top_p, self.max_new_tokens):
            row.addWidget(widget)
        row.addStretch(1)
        self.generate_estimate = QLabel("", accessibleName="Generate estimate")
        row.addWidget(self.generate_estimate)
        row.addWidget(self.generate_button)
        column.addLayout(row)
        self.columns_area = QHBoxLayout()
        column.addLayout(self.columns_area, 1)
        return page

    def _decoding_changed(self) -> None:
        """Seed, temperature and top-p matter only when sampling: disabled, with the reason, for greedy."""
        sampled = bool(self.decoding.currentData())
        why = "" if sampled else " (used only when Sampled is chosen)"
        tips = ((self.seed, "Starts the random draws: the same seed gives the same text"),
                (self.temperature, "Lower picks likelier words, higher more varied ones"),
                (self.top_p, "Draw only from the likeliest words that together make up this share of the chances"))
        for widget, tip in tips:
            widget.setEnabled(sampled)
            widget.setToolTip(tip + why + ".")

    def _build_perplexity(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        self.text = QPlainTextEdit(placeholderText="Paste text to score, or open a .txt or .jsonl file. Encoders "
                                   "(BERT-like) are compared on sentence pairs instead: one pair per line, "
                                   "separated by a tab.")
        self.text.setMaximumHeight(110)
        column.addWidget(self.text)
        row = QHBoxLayout()
        self.open_text = QPushButton("Open file…")
        self.open_text.clicked.connect(self._choose_text_file)
        self.window_tokens = QSpinBox(minimum=16, maximum=32768, value=512, suffix=" tokens per window")
        self.perplexity_button = QPushButton("Compute")
        self.perplexity_button.clicked.connect(self.compute_perplexity)
        row.addWidget(self.open_text)
        row.addWidget(self.window_tokens)
        row.addStretch(1)
        self.perplexity_estimate = QLabel("", accessibleName="Perplexity estimate")
        row.addWidget(self.perplexity_estimate)
        row.addWidget(self.perplexity_button)
        column.addLayout(row)
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["Model", "Perplexity", "Tokens", "Ran in"])
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.chart = BarChart()
        # Why a sample model scores about its vocabulary size, next to the score.
        self.perplexity_note = WrappingLabel(visible=False)
        set_status_style(self.perplexity_note, "warning")
        column.addWidget(self.table)
        column.addWidget(self.perplexity_note)
        column.addWidget(self.chart)
        column.addStretch(1)
        self._fit_table()
        return page

    def _fit_table(self) -> None:
        """The table as tall as its rows (the chart goes right under it, not below empty space)."""
        rows = sum(self.table.rowHeight(row) for row in range(self.table.rowCount()))
        self.table.setFixedHeight(self.table.horizontalHeader().height() + rows + 4)

    # --- what the user does ---------------------------------------------------------------------------------

    def references(self) -> list[str]:
        return [picker.text() for picker in self.pickers if picker.text()]

    def set_models(self, references: list[str]) -> None:
        for picker, reference in zip(self.pickers, [*references, *[""] * MAX_MODELS]):
            picker.set_text(reference, notify=False)
        self._models_changed()
        self._estimate_changed()

    def generate(self) -> None:
        references = self.references()
        if not self._can_start("generate"):
            return
        self._show_columns(references)
        job = try_job(references, self.prompt.toPlainText(), max_new_tokens=self.max_new_tokens.value(),
                      sample=bool(self.decoding.currentData()), seed=self.seed.value(),
                      temperature=self.temperature.value(), top_p=self.top_p.value(),
                      device=self.device.value() or "cpu", dtype=self.dtype.value(),
                      on_output=self._text_arrived.emit, shelf=self._shelf, probe_result=self.state.probe)
        self._start(job, "generate")

    def compute_perplexity(self) -> None:
        references = self.references()
        if not self._can_start("perplexity"):
            return
        self.table.setRowCount(0)
        self._fit_table()
        self.chart.set_values([], "")
        job = perplexity_job(references, self.text.toPlainText(), window=self.window_tokens.value(),
                             device=self.device.value() or "cpu", dtype=self.dtype.value(), shelf=self._shelf,
                             probe_result=self.state.probe)
        self._start(job, "perplexity")

    def _estimate_changed(self, *_: Any) -> None:
        """Estimate the shown tab's job for the models and input now chosen (cleared while there is none)."""
        references = self.references()
        perplexity = self.tabs.currentIndex() == 1
        label, other = ((self.perplexity_estimate, self.generate_estimate) if perplexity else
                        (self.generate_estimate, self.perplexity_estimate))
        other.clear()
        text = self.text.toPlainText() if perplexity else None
        if not references or (perplexity and not text.strip()):
            self._estimator.cancel()
            label.clear()
            return
        options = {"prompt": self.prompt.toPlainText(), "max_new_tokens": self.max_new_tokens.value(), "text": text,
                   "device": self.device.value() or "cpu", "dtype": self.dtype.value(),
                   "probe_result": self.state.probe}
        self._estimator.request(lambda: self._estimate(label, references, options))

    async def _estimate(self, label: QLabel, references: list[str], options: dict[str, Any]) -> None:
        time = await run_blocking(partial(estimate_try_time, **options), references)
        label.setText(f"Takes {time}" if time is not None else "")
        label.setToolTip(time.basis if time is not None else "")

    def stop_job(self) -> None:
        if self._key is not None:
            self.state.jobs.cancel(self._key)
            self.status.setText("Stopping…")

    def open_publish(self):
        """Open the Publish dialog for the last model of the list; returns it (None when that is no folder)."""
        from guiapp.ui.publish_dialog import PublishDialog  # only when asked for

        folder = self._publish_folder()
        if folder is None:
            self._show_hint("publish")
            return None
        dialog = PublishDialog(self.state, folder, self)
        dialog.open()
        return dialog

    def _publish_folder(self) -> Path | None:
        """The folder Publish would publish: the last model's (its adapter's), when it is one on this computer."""
        references = self.references()
        if not references:
            return None
        return publishable_folder(references[-1])

    def load_text_file(self, path: Path) -> None:
        """Read a .txt or .jsonl file into the text box (off the UI thread); a problem is shown in the status."""
        self.status.setText(f"Reading {path.name}…")
        call_in_background(lambda: read_sample_text(path), self._text_loaded,  # imports torch: off the UI thread
                           lambda error: self.status.setText(error_text(error)))

    # --- internals ------------------------------------------------------------------------------------------

    def _can_start(self, action: str) -> bool:
        """Whether `action` ("generate", "perplexity") can start now; if not, the status says what is missing."""
        if self._key is not None:
            self.status.setText("A run is in progress: stop it first.")
            return False
        if self._missing(action):
            self._show_hint(action)
            return False
        self.status.setText("")
        return True

    def _missing(self, action: str) -> str:
        """What `action` ("generate", "perplexity", "publish") still needs, in words ("" when nothing)."""
        if action == "publish":
            return "" if self._publish_folder() else ("Publishing needs a model folder on this computer as the "
                                                      "last model of the list.")
        if not self.references():
            return "Choose at least one model."
        if action == "generate" and not self.prompt.toPlainText().strip():
            return "Write a prompt first."
        if action == "perplexity" and not self.text.toPlainText().strip():
            return "Paste some text or open a file first."
        return ""

    def _show_hint(self, action: str) -> None:
        """Say what `action` still needs; the hint follows the form until it is given (`_update_hint`)."""
        self._hint = (action, self._missing(action))
        self.status.setText(self._hint[1])

    def _update_hint(self) -> None:
        """A hint still shown says what is missing now: the next thing, or nothing once all is given."""
        if self._hint is None or self.status.text() != self._hint[1]:
            self._hint = None  # the status has said something else since
            return
        self._show_hint(self._hint[0])
        if not self._hint[1]:
            self._hint = None

    def _start(self, job, mode: str) -> None:
        self._mode = mode
        self._key = self.state.jobs.submit(job).key
        self.stop.setEnabled(True)
        self.generate_button.setEnabled(False)
        self.perplexity_button.setEnabled(False)
        self.status.setText("Starting…")

    def _show_columns(self, references: list[str]) -> None:
        for column in self.columns:
            self.columns_area.removeWidget(column)
            column.deleteLater()
        self.columns = [ModelColumn(reference) for reference in references]
        for column in self.columns:
            self.columns_area.addWidget(column, 1)

    def _append_text(self, index: int, text: str) -> None:
        if index < len(self.columns):
            self.columns[index].status.setText("Generating…")
            self.columns[index].append(text)

    def _job_progress(self, key: str, event) -> None:
        if key != self._key:
            return
        counted = f" ({event.done} of {event.total})" if event.total else ""
        self.status.setText(f"{event.stage}{counted}")

    def _job_changed(self, key: str) -> None:
        record = self.state.jobs.record(key)
        if record is None:
            return
        if key != self._key:
            if record.status == "done" and record.kind in FINISHED_KINDS:
                self.set_models(models_to_try(record.kind, record.spec, record.output))
            return
        if record.status in ("queued", "running"):
            return
        self._key = None
        self.stop.setEnabled(False)
        self.generate_button.setEnabled(True)
        self.perplexity_button.setEnabled(True)
        if record.status == "done":
            self._show_results(record.summary)
            self.status.setText("Done.")
        elif record.status == "cancelled":
            self.status.setText("Stopped.")
        else:
            explanation = record.explanation or {}
            self.status.setText(" ".join(filter(None, (explanation.get("what"), explanation.get("fix")))) or
                                "The run failed; the Jobs page has the details.")

    def _show_results(self, summary: dict[str, Any]) -> None:
        for column, generation in zip(self.columns, summary.get("generations", [])):
            empty = "" if generation["text"].strip() else " (only special tokens: nothing to show)"
            untrained = f" — {sentence(generation['untrained'])}." if generation.get("untrained") else ""
            column.status.setText(f"{len(generation['tokens'])} tokens, ran in {generation['dtype']}{empty}"
                                  f"{untrained}")
        results = summary.get("results")
        if results is None:
            return
        self._scored = [entry["model"] for entry in results]
        self.table.setRowCount(len(results))
        bars = []
        for row, entry in enumerate(results):
            if entry["perplexity"] is not None:
                value, count = entry["perplexity"], str(entry["tokens"])
            else:
                value, count = entry["mean_similarity"], f"{len(entry['similarities'])} pairs (similarity)"
            for column, text in enumerate((entry["model"], f"{value:.3f}", count, entry["dtype"])):
                item = QTableWidgetItem(text)
                if entry.get("untrained"):
                    item.setToolTip(sentence(entry["untrained"]) + ".")
                self.table.setItem(row, column, item)
            bars.append((short_name(entry["model"]), value))
        notes = [f"{short_name(entry['model'])} is {entry['untrained']}." for entry in results
                 if entry.get("untrained")]
        self.perplexity_note.setText("\n".join(notes))
        self.perplexity_note.setVisible(bool(notes))
        self._fit_table()
        causal = all(entry["perplexity"] is not None for entry in results)
        self.chart.set_values(bars, "Perplexity (lower is better)" if causal else
                              "Perplexity, or mean cosine similarity for encoders")

    def _choose_text_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Text to score", "", "Text (*.txt *.jsonl);;All files (*)")
        if path:
            self.load_text_file(Path(path))

    def _text_loaded(self, text: str) -> None:
        self.text.setPlainText(text)
        self.status.setText(f"{len(text.split())} words loaded.")

    def _models_changed(self) -> None:
        """Results about other models than those chosen now go: a table of stale scores would mislead."""
        self._update_hint()
        if self._scored and self._scored != self.references():
            self._scored = []
            self.table.setRowCount(0)
            self._fit_table()
            self.chart.set_values([], "")

    def save_form(self) -> None:
        """Keep the models, the prompt and the settings (and a short text to score) for the next start."""
        from guiapp.jobs.form_memory import remember_form

        text = self.text.toPlainText()
        remember_form("try", {
            "models": [picker.text() for picker in self.pickers], "prompt": self.prompt.toPlainText(),
            "text": text if len(text) <= REMEMBERED_TEXT_CHARS else "", "sampled": bool(self.decoding.currentData()),
            "seed": self.seed.value(), "temperature": self.temperature.value(), "top_p": self.top_p.value(),
            "max_new_tokens": self.max_new_tokens.value(), "window": self.window_tokens.value(),
            "tab": self.tabs.currentIndex(),
        })

    def _restore_form(self) -> None:
        from guiapp.jobs.form_memory import remembered_form

        form = remembered_form("try")
        models = form.get("models")
        if isinstance(models, list) and all(isinstance(m, str) for m in models):
            self.set_models([m for m in models if m])
        for edit, key in ((self.prompt, "prompt"), (self.text, "text")):
            if isinstance(form.get(key), str):
                edit.setPlainText(form[key])
        if isinstance(form.get("sampled"), bool):
            self.decoding.setCurrentIndex(self.decoding.findData(form["sampled"]))
        for spin, key in ((self.seed, "seed"), (self.temperature, "temperature"), (self.top_p, "top_p"),
                          (self.max_new_tokens, "max_new_tokens"), (self.window_tokens, "window")):
            value = form.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                spin.setValue(value if isinstance(spin, QDoubleSpinBox) else int(value))
        if form.get("tab") in (0, 1):
            self.tabs.setCurrentIndex(form["tab"])

    def _refresh_capabilities(self) -> None:
        probe = self.state.probe
        self.device.set_choices(device_choices(probe, "try"))
        self.dtype.set_choices(dtype_choices(probe, "try", self.device.value() or "cpu", WRITABLE,
                                             "Each model's own dtype"))
