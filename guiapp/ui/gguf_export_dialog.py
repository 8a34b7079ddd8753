""""Export for LM Studio / Ollama…": a finished model written as one GGUF file, the file type chosen in plain
words with its size for this model, a progress bar, then where the file is, how to open it in LM Studio and
Ollama (a Modelfile is written beside it) and, by default, how much its perplexity differs from the model's.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.facts.gguf_types import KIND_WORDS
from guiapp.jobs.gguf_export import gguf_export_job
from guiapp.jobs.runner import JobStatus
from guiapp.system.units import three_digits
from guiapp.ui.background import call_in_background
from guiapp.ui.text import error_text
from guiapp.ui.widgets.wrapping_label import WrappingLabel

DEFAULT_KIND = "q4_k_m"
# The kinds offered in the window, most useful first; the CLI offers them all.
SHOWN_KINDS = ("q4_k_m", "q5_k_m", "q6_k", "q8_0", "f16")


class GgufExportDialog(QDialog):
    def __init__(self, state, folder: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.folder = Path(folder)
        self._key: str | None = None
        self._sizes: dict[str, int] = {}
        self._output_edited = False
        self.setWindowTitle("Export for LM Studio / Ollama")
        self.resize(640, 480)
        intro = WrappingLabel(f"Write {self.folder.name} as one GGUF file, the format LM Studio, Ollama and "
                              "llama.cpp load. Smaller files run on smaller computers and are a little less "
                              "accurate.")
        self.kinds = QButtonGroup(self)
        kinds_box = QVBoxLayout()
        for name in SHOWN_KINDS:
            button = QRadioButton(self._kind_text(name), checked=name == DEFAULT_KIND)
            button.setObjectName(name)
            self.kinds.addButton(button)
            kinds_box.addWidget(button)
        self.kinds.buttonToggled.connect(self._kind_changed)
        self.output = QLineEdit(str(self._default_output(DEFAULT_KIND)))
        self.output.setAccessibleName("GGUF file")
        self.output.textEdited.connect(self._mark_edited)
        self.check = QCheckBox("Check the file afterwards: compare its perplexity with the model's", checked=True)
        self.progress = QProgressBar(accessibleName="Export progress")
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.status = WrappingLabel("Working out the sizes…")
        self.export = QPushButton("Export")
        self.export.setDefault(True)
        self.export.clicked.connect(self.start)
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self._cancel_or_close)
        form = QFormLayout()
        form.addRow("Type", kinds_box)
        form.addRow("File", self.output)
        buttons = QHBoxLayout()
        buttons.addStretch()
        buttons.addWidget(self.export)
        buttons.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        for item in (intro, form, self.check, self.progress, self.status):
            (layout.addLayout if isinstance(item, QFormLayout) else layout.addWidget)(item)
        layout.addStretch()
        layout.addLayout(buttons)
        state.jobs.progress.connect(self._job_progress)
        state.jobs.record_changed.connect(self._job_changed)
        call_in_background(self._predict, self._predicted, self._prediction_failed)

    def chosen_kind(self) -> str:
        return self.kinds.checkedButton().objectName()

    def _kind_text(self, name: str) -> str:
        size = f" — {three_digits(self._sizes[name])}" if name in self._sizes else ""
        return f"{name.upper()}{size}: {KIND_WORDS[name]}"

    def _default_output(self, kind: str) -> Path:
        return self.folder.parent / f"{self.folder.name}-{kind.upper()}.gguf"

    def _mark_edited(self, _text: str) -> None:
        self._output_edited = True

    def _kind_changed(self, _button, checked: bool) -> None:
        if checked and not self._output_edited:
            self.output.setText(str(self._default_output(self.chosen_kind())))

    def _predict(self) -> dict[str, int]:
        from guiapp.jobs.gguf_export import predicted_gguf_sizes

        return predicted_gguf_sizes(self.folder)

    def _predicted(self, sizes: dict[str, int]) -> None:
        self._sizes = sizes
        for button in self.kinds.buttons():
            button.setText(self._kind_text(button.objectName()))
        self.status.setText("Ready.")

    def _prediction_failed(self, error: BaseException) -> None:
        self.status.setText(error_text(error))
        self.export.setEnabled(False)

    def start(self) -> None:
        job = gguf_export_job(str(self.folder), Path(self.output.text().strip()), self.chosen_kind(),
                              check=self.check.isChecked(), modelfile=True)
        self._key = self.state.jobs.submit(job).key
        self.export.setEnabled(False)
        self.close_button.setText("Cancel export")
        self.progress.show()
        self.status.setText("Starting…")

    def _cancel_or_close(self) -> None:
        if self._key is not None:
            self.state.jobs.cancel(self._key)
            self.status.setText("Cancelling…")
        else:
            self.reject()

    def _job_progress(self, key: str, event) -> None:
        if key == self._key:
            self.progress.setValue(int(event.fraction * 1000))
            self.status.setText(f"{event.stage}: {event.item}" if event.item else event.stage)

    def _job_changed(self, key: str) -> None:
        record = self.state.jobs.record(key)
        if key != self._key or record is None or record.status.active:
            return
        self._key = None
        self.close_button.setText("Close")
        self.export.setEnabled(True)
        if record.status == JobStatus.DONE:
            self.progress.setValue(1000)
            self.status.setText(finished_text(record.summary))
        elif record.status == JobStatus.CANCELLED:
            self.status.setText("Cancelled. No file was left behind.")
        else:
            explanation = record.explanation or {}
            self.status.setText(" ".join(filter(None, (explanation.get("what"), explanation.get("fix")))))


def finished_text(summary: dict) -> str:
    """Where the file is, how to open it in LM Studio and Ollama, and the check's result."""
    path = Path(summary["file"])
    lines = [f"Done: {path} ({three_digits(summary['bytes'])}).",
             f"LM Studio: My Models › Import, or copy the file into LM Studio's models folder "
             f"(lms import \"{path}\").",
             f"Ollama: in {path.parent}, run: ollama create {path.stem.lower()} -f \"{Path(summary['modelfile']).name}\""
             if summary.get("modelfile") else "",
             f"Check: {summary['check']['summary']}." if summary.get("check") else ""]
    return "\n".join(line for line in lines if line)


class GgufExportButton(QPushButton):
    """"Export for LM Studio / Ollama…" for the Jobs page's selected job: shown for merges and applies, enabled
    once the job has finished and its model folder is there."""

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__("Export for LM Studio / Ollama…", parent)
        self.state = state
        self.folder: Path | None = None
        self.dialog: GgufExportDialog | None = None
        self.clicked.connect(self.open_dialog)
        self.show_record(None)

    def show_record(self, record) -> None:
        """Follow the selected job's record (None: no job selected)."""
        exportable = record is not None and record.kind in ("merge", "apply")
        folder = Path(record.output) if exportable and record.status == JobStatus.DONE and record.output else None
        self.folder = folder if folder is not None and folder.is_dir() else None
        self.setVisible(exportable)
        self.setEnabled(self.folder is not None)

    def open_dialog(self) -> GgufExportDialog | None:
        if self.folder is None:
            return None
        self.dialog = GgufExportDialog(self.state, self.folder, self.window())
        self.dialog.open()
        return self.dialog
