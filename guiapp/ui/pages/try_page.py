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

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from guiapp.facts.dtypes import WRITABLE
from guiapp.jobs.runner import JobStatus
from guiapp.jobs.specs import job_kind, models_to_try
from guiapp.jobs.tryout import (
    ModelShelf,
    estimate_try_time,
    perplexity_job,
    publishable_folder,
    read_sample_text,
    try_job,
)
from guiapp.ui.background import LatestTask, call_in_background, run_blocking
from guiapp.ui.text import error_text
from guiapp.ui.tryout.generate_tab import GenerateTab, ModelColumn
from guiapp.ui.tryout.models_box import TryModelsBox
from guiapp.ui.tryout.perplexity_tab import PerplexityTab
from guiapp.ui.widgets.options import device_choices, dtype_choices
from guiapp.ui.widgets.wrapping_label import WrappingLabel

# A text to score longer than this (a whole file opened) is not kept for the next start: the models and the
# prompt are, and the file can be opened again.
REMEMBERED_TEXT_CHARS = 16_000


class TryPage(QWidget):
    """Pick models, then Generate (columns) or Perplexity (table and bar chart); Stop cancels either."""

    _text_arrived = Signal(int, str)  # model index, text (emitted on the job's thread, handled on the UI thread)

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._shelf = ModelShelf()
        self._key: str | None = None
        self._mode = ""

        self.models_box = models_box = TryModelsBox()
        self.pickers, self.device, self.dtype = models_box.pickers, models_box.device, models_box.dtype
        self.publish_button = models_box.publish_button
        self.device.choice_changed.connect(lambda _: self._refresh_capabilities())
        self.publish_button.clicked.connect(self.open_publish)

        self.generate_tab = generate = GenerateTab()
        generate.generate_button.clicked.connect(self.generate)
        self.prompt, self.decoding, self.seed = generate.prompt, generate.decoding, generate.seed
        self.temperature, self.top_p, self.max_new_tokens = generate.temperature, generate.top_p, \
            generate.max_new_tokens
        self.generate_button, self.generate_estimate = generate.generate_button, generate.generate_estimate
        self.perplexity_tab = scoring = PerplexityTab()
        scoring.perplexity_button.clicked.connect(self.compute_perplexity)
        scoring.file_chosen.connect(self.load_text_file)
        self.text, self.window_tokens, self.open_text = scoring.text, scoring.window_tokens, scoring.open_text
        self.perplexity_button, self.perplexity_estimate = scoring.perplexity_button, scoring.perplexity_estimate
        self.table, self.chart, self.perplexity_note = scoring.table, scoring.chart, scoring.perplexity_note
        self.tabs = QTabWidget()
        for tab, title in ((generate, "Generate"), (scoring, "Perplexity")):
            scroll = QScrollArea(widgetResizable=True)  # the window's minimum size stays the other pages'
            scroll.setWidget(tab)
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

        self._text_arrived.connect(generate.append_text, Qt.ConnectionType.QueuedConnection)
        state.probe_ready.connect(lambda _: self._refresh_capabilities())
        state.jobs.record_changed.connect(self._job_changed)
        state.jobs.progress.connect(self._job_progress)
        for picker in self.pickers:
            picker.use_library(state.library)
            picker.changed.connect(lambda _: self._models_changed())
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

    @property
    def columns(self) -> list[ModelColumn]:
        """The Generate tab's columns, one per model of the last run."""
        return self.generate_tab.columns

    # --- what the user does ---------------------------------------------------------------------------------

    def references(self) -> list[str]:
        return self.models_box.references()

    def set_models(self, references: list[str]) -> None:
        self.models_box.set_references(references)
        self._models_changed()
        self._estimate_changed()

    def generate(self) -> None:
        references = self.references()
        if not self._can_start("generate"):
            return
        self.generate_tab.show_columns(references)
        job = try_job(references, self.prompt.toPlainText(), **self.generate_tab.sampling(),
                      device=self.device.value() or "cpu", dtype=self.dtype.value(),
                      on_output=self._text_arrived.emit, shelf=self._shelf, probe_result=self.state.probe)
        self._start(job, "generate")

    def compute_perplexity(self) -> None:
        references = self.references()
        if not self._can_start("perplexity"):
            return
        self.perplexity_tab.clear_results()
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
            if record.status == JobStatus.DONE and job_kind(record.kind).makes_model:
                self.set_models(models_to_try(record.kind, record.spec, record.output))
            return
        if record.status.active:
            return
        self._key = None
        self.stop.setEnabled(False)
        self.generate_button.setEnabled(True)
        self.perplexity_button.setEnabled(True)
        if record.status == JobStatus.DONE:
            self._show_results(record.summary)
            self.status.setText("Done.")
        elif record.status == JobStatus.CANCELLED:
            self.status.setText("Stopped.")
        else:
            explanation = record.explanation or {}
            self.status.setText(" ".join(filter(None, (explanation.get("what"), explanation.get("fix")))) or
                                "The run failed; the Jobs page has the details.")

    def _show_results(self, summary: dict[str, Any]) -> None:
        self.generate_tab.show_generations(summary.get("generations", []))
        if summary.get("results") is not None:
            self.perplexity_tab.show_results(summary["results"])

    def _text_loaded(self, text: str) -> None:
        self.text.setPlainText(text)
        self.status.setText(f"{len(text.split())} words loaded.")

    def _models_changed(self) -> None:
        """Results about other models than those chosen now go: a table of stale scores would mislead."""
        self._update_hint()
        self.perplexity_tab.keep_results_for(self.references())

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
