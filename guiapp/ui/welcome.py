"""The first page a new user sees: what the two jobs are, and "Try it with sample models".

The samples are two tiny fine-tunes of one tiny base model, generated on this computer (no download), and a
TIES merge of them pre-filled on the Merge page: pressing Run shows a whole job work in seconds.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget

from guiapp.jobs.runner import JobStatus
from guiapp.jobs.specs import MergeSpec
from guiapp.ui.background import call_in_background
from guiapp.ui.text import error_text
from guiapp.ui.theme import set_heading, set_status_style
from guiapp.ui.widgets.wrapping_label import WrappingLabel


class WelcomePage(QWidget):
    samples_ready = Signal(object, str)  # recipe document, output folder
    go_to = Signal(str)
    search_typed = Signal(str)  # what was typed in the Start page's search box, to go on with on the Models page

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._sample_output: str | None = None  # where the sample merge writes, once it is on the Merge page
        title = QLabel("Welcome to Mergesmith")
        set_heading(title, 1.8)
        intro = WrappingLabel(
            "<p><b>Merge</b> combines several fine-tunes of the same base model into one model that keeps what "
            "each of them learned.</p><p><b>Extract LoRA</b> turns a fine-tuned model into a small adapter: its "
            "difference from the base model, which you can share or apply to the base later.</p>")
        self.try_button = QPushButton("Try it with sample models")
        self.try_button.setDefault(True)
        self.try_button.clicked.connect(lambda: self.try_samples())
        button_font = self.try_button.font()
        button_font.setBold(True)
        button_font.setPointSizeF(button_font.pointSizeF() * 1.15)
        self.try_button.setFont(button_font)
        self.try_button.setMinimumHeight(36)
        try_note = WrappingLabel("Writes three tiny models to your computer (a base model and two fine-tunes of it, under "
                          "1 MB in all) and fills in a merge of the fine-tunes. Nothing is downloaded; the merge "
                          "takes seconds.")
        self.status = WrappingLabel()
        # Typing here goes on in the Models page's search box (results as you type): the first key takes you there.
        self.search_edit = QLineEdit(placeholderText="Find models on the Hub: type a name…",
                                     accessibleName="Find models on the Hub")
        self.search_edit.setMinimumWidth(320)
        self.search_edit.textEdited.connect(self._typed)
        self.search_edit.returnPressed.connect(lambda: self.go_to.emit("models"))
        merge = QPushButton("Start a merge")
        merge.clicked.connect(lambda: self.go_to.emit("merge"))
        extract = QPushButton("Extract a LoRA")
        extract.clicked.connect(lambda: self.go_to.emit("lora"))
        others = QHBoxLayout()
        for widget in (self.search_edit, merge, extract):
            others.addWidget(widget)
        others.addStretch()
        column = QVBoxLayout()
        column.addWidget(title)
        column.addWidget(intro)
        column.addSpacing(12)
        column.addWidget(self.try_button, 0, Qt.AlignmentFlag.AlignLeft)
        column.addWidget(try_note)
        column.addWidget(self.status)
        column.addSpacing(12)
        column.addWidget(QLabel("Or start on your own:"))
        column.addLayout(others)
        column.addStretch()
        box = QWidget()
        box.setLayout(column)
        box.setMaximumWidth(720)
        layout = QHBoxLayout(self)
        layout.addStretch()
        layout.addWidget(box, 3)
        layout.addStretch()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.search_edit.setFocus()  # a user who starts typing is searching the Hub

    def _typed(self, text: str) -> None:
        self.search_edit.clear()  # the box hands its text on: coming back to the Start page finds it empty
        if text:
            self.search_typed.emit(text)

    def try_samples(self, folder: Path | None = None) -> None:
        """Generate the sample models (worker thread), then hand the demo recipe to the Merge page."""
        from guiapp.jobs.demo import default_demo_folder  # no torch at import

        folder = Path(folder or default_demo_folder())
        self.try_button.setEnabled(False)
        self.status.setText(f"Writing the sample models to {folder}…")
        set_status_style(self.status, "muted")

        def prepare():
            from guiapp.jobs.demo import prepare_demo
            from guiapp.jobs.naming import default_output

            # An earlier sample run's result is the user's: this run writes beside it ("merged-2").
            return prepare_demo(folder), str(default_output(folder, "merged"))

        call_in_background(prepare, lambda prepared: self._ready(*prepared), self._failed)

    def _ready(self, recipe, output: str) -> None:
        self.try_button.setEnabled(True)
        self.status.setText("The sample merge is ready on the Merge page: press Run merge.")
        set_status_style(self.status, "good")
        self._sample_output = output
        self.samples_ready.emit(recipe.document, output)

    def follow_job(self, record) -> None:
        """Keep the status about the sample merge true once it runs (a `JobRecord` of any job may come here)."""
        if record is None or record.kind != MergeSpec.kind or self._sample_output is None \
                or str(record.spec.get("output")) != self._sample_output:
            return
        text, kind = {
            JobStatus.QUEUED: ("The sample merge is waiting to start: see the Jobs page.", "muted"),
            JobStatus.RUNNING: ("The sample merge is running: progress on the Jobs page.", "muted"),
            JobStatus.DONE: (f"The sample merge is done: the merged model is in {self._sample_output}. The Try page "
                     "runs it next to the models it came from.", "good"),
            JobStatus.FAILED: ("The sample merge failed: the Jobs page says why and offers to retry.", "problem"),
        }.get(record.status, ("The sample merge was stopped. Run merge on the Merge page starts it again.",
                              "warning"))
        self.status.setText(text)
        set_status_style(self.status, kind)

    def _failed(self, error: BaseException) -> None:
        self.try_button.setEnabled(True)
        self.status.setText(f"The sample models could not be written: {error_text(error)}")
        set_status_style(self.status, "problem")
