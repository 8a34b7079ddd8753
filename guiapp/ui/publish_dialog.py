"""The Publish dialog for a model folder or a GGUF file: a repo name, private by default, a licence preset from the inputs, the card to review.

Everything the Hub would refuse is checked (in the background) before Publish is enabled: sign-in, a token
that can write, the name, whose namespace it is. The upload runs as a job on the runner, with its progress here
(files, bytes, rate, time left) and Cancel; the Jobs page lists it too.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.errors import MergesmithError
from guiapp.jobs.publish import (
    PublishStart,
    card_with_licence,
    check_publish,
    licence_choices,
    model_card,
    prepare_publish,
    publish_job,
    suggested_repo_name,
)
from guiapp.jobs.runner import JobStatus
from guiapp.jobs.specs import job_kind, published_path
from guiapp.ui.background import LatestCall, call_in_background
from guiapp.ui.text import error_text
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.wrapping_label import WrappingLabel


class PublishDialog(QDialog):
    def __init__(self, state, folder: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.folder = Path(folder)
        self._key: str | None = None
        self._ready = False
        self._not_a_model: str | None = None  # what the folder lacks to be a model, as the last check found
        self.confirm: QMessageBox | None = None
        self._generated_card = ""  # the card as Mergesmith last wrote it; any other text is the user's
        self.setWindowTitle(f"Publish {self.folder.name}")
        self.resize(820, 720)
        self._name = suggested_repo_name(self.folder)
        self.repo = QLineEdit(self._name, placeholderText="your-user-name/model-name")
        self.private = QCheckBox("Private: only you (and your organisation) can see it", checked=True)
        self.licence = QComboBox(editable=True)
        self.licence.addItems(licence_choices())
        self.check_status = WrappingLabel("Checking…")
        self.warnings = WrappingLabel("")
        set_status_style(self.warnings, "warning")
        self.warnings.hide()
        self.card = QPlainTextEdit()
        self.card.setAccessibleName("Model card (README.md)")
        self.progress = QProgressBar()
        self.progress.hide()
        self.progress_text = WrappingLabel("")
        self.publish = QPushButton("Publish", enabled=False)
        self.cancel = QPushButton("Close")
        self.publish.clicked.connect(self.start)
        self.cancel.clicked.connect(self._cancel_or_close)

        form = QFormLayout()
        form.addRow("File" if self.folder.is_file() else "Folder", WrappingLabel(str(self.folder)))
        form.addRow("Repo", self.repo)
        form.addRow("", self.private)
        form.addRow("Licence", self.licence)
        buttons = QHBoxLayout()
        buttons.addWidget(self.progress_text, 1)
        buttons.addWidget(self.cancel)
        buttons.addWidget(self.publish)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.check_status)
        layout.addWidget(self.warnings)
        layout.addWidget(QLabel("Model card (README.md): review and edit it before publishing."))
        layout.addWidget(self.card, 1)
        layout.addWidget(self.progress)
        layout.addLayout(buttons)

        self._checker = LatestCall(400, self)
        self.repo.textChanged.connect(lambda _: self.check())
        self.private.toggled.connect(lambda _: self.check())
        self.licence.currentTextChanged.connect(self._licence_changed)
        state.jobs.progress.connect(self._job_progress)
        state.jobs.record_changed.connect(self._job_changed)
        call_in_background(lambda: prepare_publish(self.folder), self._prepared, self._prepare_failed)

    # --- checks and card ----------------------------------------------------------------------------------

    def _prepared(self, start: PublishStart) -> None:
        if start.user and "/" not in self.repo.text():
            self.repo.setText(f"{start.user}/{self._name}")
        self.licence.setCurrentText(start.licence)
        self.warnings.setText("\n".join(f"⚠ {w}" for w in start.warnings))
        self.warnings.setVisible(bool(start.warnings))
        self._fill_card()
        self.check()

    def _prepare_failed(self, error: BaseException) -> None:
        self._fill_card()
        self._show_check(error_text(error), "problem", ready=False)

    def _licence_changed(self, _: str) -> None:
        """Only the card's licence line follows the licence: the user's edits to the card stay."""
        edited = self._card_edited()
        self.card.setPlainText(card_with_licence(self.card.toPlainText(), self._chosen_licence()))
        if not edited:
            self._generated_card = self.card.toPlainText()

    def _card_edited(self) -> bool:
        return self.card.toPlainText() != self._generated_card

    def _chosen_licence(self) -> str:
        return self.licence.currentText().strip() or "other"

    def _fill_card(self) -> None:
        """Write the card from the folder, unless the user has edited it (their text is never replaced)."""
        if self._card_edited():
            return
        try:
            self._generated_card = model_card(self.folder, self.repo.text().strip() or self._name,
                                              self._chosen_licence())
        except MergesmithError:  # a GGUF file that cannot be read: the check shows why, and Publish stays off
            self._generated_card = ""
        self.card.setPlainText(self._generated_card)

    def check(self) -> None:
        """Ask the Hub (in the background) whether this repo name can be published to now."""
        repo, folder, private = self.repo.text().strip(), self.folder, self.private.isChecked()
        self._show_check("Checking…", "", ready=False)
        # Any folder is checked; one that does not look like a model is published only when the user confirms.
        self._checker.request(lambda: check_publish(folder, repo, private), self._checked,
                              lambda error: self._show_check(error_text(error), "problem", ready=False))

    def _checked(self, plan) -> None:
        from guiapp.system.units import format_bytes, plural

        where = "adds a commit to your existing repo" if plan.exists else "creates the repo"
        ready = (f"Ready: {plural(len(plan.files), 'file')}, {format_bytes(plan.total_bytes)}, as {plan.user}; "
                 f"publishing {where} {plan.repo_id}.")
        self._not_a_model = plan.not_a_model
        if plan.not_a_model is None:
            self._show_check(ready, "good", ready=True)
        else:
            self._show_check(f"⚠ {self.folder} does not look like a model or an adapter: {plan.not_a_model}. Check "
                             f"that this is the folder you meant to share.\n{ready}", "warning", ready=True)

    def _show_check(self, text: str, status: str, ready: bool) -> None:
        self._ready = ready
        self.check_status.setText(text)
        set_status_style(self.check_status, status)
        self.publish.setEnabled(ready and self._key is None)

    # --- the upload ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Publish; a folder that does not look like a model is published only after the user confirms."""
        if self._not_a_model is None:
            self._start_job(any_folder=False)
            return
        self.confirm = QMessageBox(QMessageBox.Icon.Warning, "Publish this folder?",
                                   f"{self.folder} does not look like a model or an adapter: {self._not_a_model}."
                                   "\n\nEverything in it would be uploaded. Publish it anyway?",
                                   QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self)
        anyway = self.confirm.button(QMessageBox.StandardButton.Yes)
        anyway.setText("Publish anyway")
        self.confirm.setDefaultButton(QMessageBox.StandardButton.Cancel)
        self.confirm.buttonClicked.connect(lambda button: self._start_job(any_folder=True) if button is anyway
                                           else None)
        self.confirm.open()

    def _start_job(self, any_folder: bool) -> None:
        job = publish_job(self.folder, self.repo.text().strip(), private=self.private.isChecked(),
                          card=self.card.toPlainText(), any_folder=any_folder)
        self._key = self.state.jobs.submit(job).key
        self.publish.setEnabled(False)
        self.cancel.setText("Cancel upload")
        self.progress.show()
        self.progress.setRange(0, 1000)
        self.progress_text.setText("Starting…")

    def _cancel_or_close(self) -> None:
        if self._key is not None:
            self.state.jobs.cancel(self._key)
            self.progress_text.setText("Cancelling…")
        else:
            self.reject()

    def _job_progress(self, key: str, event) -> None:
        if key != self._key:
            return
        from guiapp.system.units import format_bytes, format_seconds

        self.progress.setValue(int(event.fraction * 1000))
        rate = f", {format_bytes(int(event.rate))}/s" if event.rate else ""
        left = f", {'about ' if event.eta >= 1 else ''}{format_seconds(event.eta)} left" if event.eta is not None else ""
        current = f" (last: {event.item})" if event.item else ""
        self.progress_text.setText(f"File {event.done} of {event.total}, {format_bytes(event.bytes_done)} of "
                                   f"{format_bytes(event.bytes_total)}{rate}{left}{current}")

    def _job_changed(self, key: str) -> None:
        record = self.state.jobs.record(key)
        if key != self._key or record is None or record.status.active:
            return
        self._key = None
        self.cancel.setText("Close")
        self.publish.setEnabled(self._ready)
        if record.status == JobStatus.DONE:
            self.progress.setValue(1000)
            self.progress_text.setText(f"Published: {record.summary['url']}")
        elif record.status == JobStatus.CANCELLED:
            self.progress_text.setText("Cancelled. Publishing again sends only the files not uploaded yet.")
        else:
            explanation = record.explanation or {}
            self.progress_text.setText(" ".join(filter(None, (explanation.get("what"), explanation.get("fix")))))


class PublishOutputButton(QPushButton):
    """"Publish…" for the Jobs page's selected job: shown for jobs that make a model or an adapter and for GGUF
    exports, enabled once the job has finished and its folder (or file) is there, and opening the Publish dialog
    on it."""

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__("Publish…", parent)
        self.state = state
        self.folder: Path | None = None
        self.dialog: PublishDialog | None = None
        self.clicked.connect(self.open_dialog)
        self.show_record(None)

    def show_record(self, record) -> None:
        """Follow the selected job's record (None: no job selected)."""
        kind = job_kind(record.kind) if record is not None else None
        publishable = kind is not None and (kind.makes_model or kind.publishes_file)
        self.folder = published_path(record) if publishable else None
        self.setVisible(publishable)
        self.setEnabled(self.folder is not None)
        self.setToolTip(f"Share {self.folder} on the Hugging Face Hub, with a model card you review first."
                        if self.folder else "A job's output can be published once the job has finished and its "
                        "folder or file is still there.")

    def open_dialog(self) -> PublishDialog | None:
        """Open the Publish dialog on the job's output; returns it (None when there is nothing to publish)."""
        if self.folder is None:
            return None
        self.dialog = PublishDialog(self.state, self.folder, self.window())
        self.dialog.open()
        return self.dialog
