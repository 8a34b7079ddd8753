"""The Models page's details pane: one Hub model's facts, files and fit badge, and what to do with it.

Loading is a coroutine awaited on the Qt loop; opening another model cancels the one still loading, so a slow
answer never replaces a newer one.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QGridLayout, QLabel, QListWidget, QPushButton, QVBoxLayout, QWidget

from guiapp.jobs.runner import JobStatus
from guiapp.jobs.specs import DownloadSpec
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.text import error_text, html_escape
from guiapp.ui.theme import set_heading, set_status_style
from guiapp.ui.widgets.open_link import LinkFallback
from guiapp.ui.widgets.wrapping_label import WrappingLabel

# The badge's colour by the worst of the disk and memory verdicts (guiapp.system.resources.FitLevel names).
FIT_STYLES = {"WILL_NOT_FIT": "problem", "TIGHT": "warning"}


class ModelDetailsPane(QWidget):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.details: Any = None  # guiapp.hub.details.ModelDetails of the model shown
        self._loader = LatestTask(0, self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.detail_title = WrappingLabel("Select a model to see its details.")
        set_heading(self.detail_title, 1.15)
        self.fit_badge = WrappingLabel()
        self.detail_facts = WrappingLabel(openExternalLinks=True)
        self.detail_facts.setTextFormat(Qt.TextFormat.RichText)
        self.detail_files = QListWidget(accessibleName="Files")
        self.detail_files.setMaximumHeight(150)
        self.detail_status = WrappingLabel()
        self.download_button = QPushButton("Download")
        self.download_button.setToolTip("Download the files a merge needs into the Hugging Face cache (a job)")
        self.download_button.clicked.connect(self._download)
        self.base_button = QPushButton("Use as base")
        self.base_button.clicked.connect(lambda: self.details and state.use_as_base.emit(self.details.repo_id))
        self.chosen: list[tuple[str, tuple[str, ...]]] = []  # the selected results: (repo id, the bases it names)
        self.add_button = QPushButton("Add to merge")
        self.add_button.clicked.connect(self._add_to_merge)
        self.extract_button = QPushButton("Extract LoRA from this")
        self.extract_button.clicked.connect(self._extract_from_details)
        self.page_button = QPushButton("Open on the Hub")
        self.page_link = LinkFallback()  # the address to copy when no browser opens it
        self.page_button.clicked.connect(lambda: self.details and self.page_link.open(QUrl(self.details.page_url),
                                                                                      "web pages"))
        actions = QGridLayout()  # two by two: the pane stays narrow enough for a 1024-pixel window
        for index, button in enumerate((self.download_button, self.extract_button, self.base_button,
                                        self.add_button)):
            actions.addWidget(button, index // 2, index % 2)
        self._actions = (self.download_button, self.base_button, self.add_button, self.extract_button,
                         self.page_button)
        for widget in (self.detail_title, self.fit_badge, self.detail_facts):
            layout.addWidget(widget)
        layout.addWidget(QLabel("Files"))
        layout.addWidget(self.detail_files)
        layout.addWidget(self.detail_status)
        layout.addLayout(actions)
        layout.addWidget(self.page_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.page_link)
        layout.addStretch()
        self._enable_actions(False)
        state.jobs.record_changed.connect(self._job_changed)

    def open_details(self, repo_id: str) -> None:
        """Show `repo_id`'s details (one Hub request, awaited off the UI thread) and its fit on this machine."""
        self.detail_title.setText(repo_id)
        self.detail_facts.setText("Loading the details…")
        self.detail_files.clear()
        self.fit_badge.clear()
        self.detail_status.clear()
        self.page_link.hide_address()
        self._enable_actions(False)
        self._loader.request(lambda: self._load(repo_id))

    def clear(self) -> None:
        """Show no model (the one shown left the search results); a details request still running is dropped."""
        self._loader.cancel()
        self.details = None
        self.detail_title.setText("Select a model to see its details.")
        for label in (self.detail_facts, self.fit_badge, self.detail_status):
            label.clear()
        self.detail_files.clear()
        self._enable_actions(False)

    async def _load(self, repo_id: str) -> None:
        from guiapp.jobs import library  # the Hub client loads on first use

        try:
            answer = await run_blocking(library.details_with_fit, repo_id)
        except Exception as error:  # offline, not found, gated…: said in the pane
            self.detail_facts.setText(html_escape(error_text(error)))
            set_status_style(self.detail_facts, None)
            return
        self._show(answer.details, answer.fit)

    def _show(self, details: Any, fit: Any) -> None:
        from guiapp.system.units import format_bytes

        self.details = details
        self.detail_title.setText(details.repo_id)
        by_dtype = ", ".join(f"{count_text(n)} {dtype}" for dtype, n in details.parameters_by_dtype.items())
        facts = [
            ("Parameters", f"{count_text(details.parameters)} ({by_dtype})" if details.parameters else "unknown "
             "(no safetensors)"),
            ("Licence", (details.licence or "not stated") + (" — gated: accept it on the Hub page first"
                                                             if details.gated else "")),
            ("Base model", ", ".join(details.base_models) or "—"),
            ("Task", details.pipeline_tag or "—"),
            ("Library", details.library or "—"),
            ("Download", f"{format_bytes(details.download_size)} for merging (whole repository "
             f"{format_bytes(details.repo_size)})"),
            ("Popularity", f"{details.downloads:,} downloads, {details.likes:,} likes"),
            ("Updated", details.last_modified.strftime("%Y-%m-%d") if details.last_modified else "—"),
            ("Tags", ", ".join(t for t in details.tags if ":" not in t)[:200] or "—"),
        ] + ([("Quantized", fit.quantization)] if fit is not None and fit.quantization else [])
        self.detail_facts.setText("<table>" + "".join(f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{html_escape(v)}</td></tr>"
                                                      for k, v in facts) + "</table>")
        self.detail_files.clear()
        for file in details.files:
            self.detail_files.addItem(f"{file.name}  ({format_bytes(file.size)})")
        if fit is not None:
            self.fit_badge.setText(f"● {fit.badge()}")
            self.fit_badge.setToolTip(fit.details())
            set_status_style(self.fit_badge, FIT_STYLES.get(fit.level.name, "good"))
        self._enable_actions(True)
        self.extract_button.setToolTip(f"Extract a LoRA of this model against {details.base_models[0]}"
                                       if details.base_models else "Extract a LoRA of this model (choose its base)")

    def set_chosen(self, chosen: list[tuple[str, tuple[str, ...]]]) -> None:
        """The models selected in the results, each with the base models it names: "Add to merge" adds them all."""
        self.chosen = chosen
        several = len(chosen) > 1
        self.add_button.setText(f"Add {len(chosen)} models to merge" if several else "Add to merge")
        self.add_button.setToolTip("Add the selected models to the merge; one the others name as their base model "
                                   "becomes the merge's base" if several else "Add this model to the merge")

    def _add_to_merge(self) -> None:
        if len(self.chosen) <= 1:
            if self.details is not None:
                self.state.add_to_merge.emit(self.details.repo_id)
            return
        base = base_of_the_others(self.chosen)
        if base is not None:
            self.state.use_as_base.emit(base)
        for repo_id, _ in self.chosen:
            if repo_id != base:
                self.state.add_to_merge.emit(repo_id)

    def _enable_actions(self, enabled: bool) -> None:
        for button in self._actions:
            button.setEnabled(enabled)

    def _extract_from_details(self) -> None:
        if self.details is not None:
            self.state.extract_from.emit(self.details.repo_id, self.details.base_models[0] if self.details.base_models else "")

    def _download(self) -> None:
        from guiapp.jobs.specs import download_job

        if self.details is None:
            return
        self.state.jobs.submit(download_job(self.details.repo_id))
        self.detail_status.setText(f"Downloading {self.details.repo_id}: progress on the Jobs page.")
        set_status_style(self.detail_status, "muted")

    def _job_changed(self, key: str) -> None:
        """The status line follows a download of the model shown: done, failed or cancelled."""
        record = self.state.jobs.record(key)
        if (record is None or record.kind != DownloadSpec.kind or self.details is None
                or record.spec.get("repo_id") != self.details.repo_id or record.status.active):
            return
        if record.status == JobStatus.DONE:
            repo_id = self.details.repo_id
            self.open_details(repo_id)  # read again: the fit now says "downloaded"
            self.detail_status.setText(f"Downloaded {repo_id}: it is in every model list now.")
            set_status_style(self.detail_status, "good")
        else:
            self.detail_status.setText(f"The download of {self.details.repo_id} {record.status}: the Jobs page "
                                       "says why and can retry it.")
            set_status_style(self.detail_status, "problem")


def base_of_the_others(chosen: list[tuple[str, tuple[str, ...]]]) -> str | None:
    """The one chosen model every other chosen model names as its base (repo id, bases named), else None."""
    found = [repo_id for repo_id, _ in chosen
             if all(repo_id in bases for other, bases in chosen if other != repo_id)]
    return found[0] if len(found) == 1 else None


def count_text(value: int | None) -> str:
    """A parameter count as people say it ("7.2B", "350.0M"); "" when unknown."""
    if not value:
        return ""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)
