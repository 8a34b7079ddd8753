"""The Models page: search the Hub as you type, read a model's details (with a fit badge for this machine),
and manage what is on this computer: the Hugging Face cache (Downloaded) and added Local folders.

Every Hub request runs on a worker thread; a newer search makes older ones stale (their answers are dropped).
Actions hand a model reference to the other pages: Use as base, Add to merge, Extract LoRA from this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from guiapp.ui.background import LatestCall, call_in_background
from guiapp.ui.text import error_text, html_escape
from guiapp.ui.theme import set_status_style

SEARCH_DELAY_MS = 350
SIZE_FILTERS = {"Any size": (None, None), "Under 1B parameters": (None, 1_000_000_000),
                "1B to 10B": (1_000_000_000, 10_000_000_000), "Over 10B": (10_000_000_000, None)}


class ModelsPage(QWidget):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._search = None  # guiapp.hub.search.ModelSearch, created on first use
        self._results = None
        self.details: Any = None
        self._searcher = LatestCall(SEARCH_DELAY_MS, self)
        self._detailer = LatestCall(0, self)
        self.tabs = QTabWidget()
        self.tabs.addTab(self._build_search(), "Search the Hub")
        self.tabs.addTab(self._build_downloaded(), "Downloaded")
        self.tabs.addTab(self._build_local(), "Local folders")
        self.tabs.currentChanged.connect(self._tab_changed)
        state.jobs.record_changed.connect(self._job_changed)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)

    # --- search ----------------------------------------------------------------------------------------------

    def _build_search(self) -> QWidget:
        page = QWidget()
        self.search_edit = QLineEdit(placeholderText="Search models on the Hugging Face Hub (Ctrl+F)",
                                     accessibleName="Search models", clearButtonEnabled=True)
        self.search_edit.textChanged.connect(lambda _: self.search())
        self.sort_combo = QComboBox(accessibleName="Sort by")
        for label, key in (("Trending", "trending"), ("Most downloads", "downloads"), ("Most likes", "likes"),
                           ("Recently updated", "updated")):
            self.sort_combo.addItem(label, key)
        self.sort_combo.currentIndexChanged.connect(lambda _: self.search())
        self.size_combo = QComboBox(accessibleName="Model size")
        self.size_combo.addItems(list(SIZE_FILTERS))
        self.size_combo.currentIndexChanged.connect(lambda _: self.search())
        self.hide_gated = QCheckBox("Hide gated")
        self.hide_gated.setToolTip("Gated models need you to accept a licence on their Hub page first")
        self.hide_gated.toggled.connect(lambda _: self.search())
        bar = QHBoxLayout()
        bar.addWidget(self.search_edit, 1)
        bar.addWidget(self.sort_combo)
        bar.addWidget(self.size_combo)
        bar.addWidget(self.hide_gated)

        self.results = QTableWidget(0, 7, accessibleName="Search results")
        self.results.setHorizontalHeaderLabels(["Model", "Size", "Parameters", "Downloads", "Likes", "Updated",
                                                "Gated"])
        self.results.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.results.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.results.verticalHeader().setVisible(False)
        header = self.results.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, 7):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.results.itemSelectionChanged.connect(self._result_selected)
        self.search_status = QLabel(wordWrap=True)
        self.more_button = QPushButton("Load more results")
        self.more_button.clicked.connect(self._load_more)
        self.more_button.setVisible(False)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addLayout(bar)
        left_layout.addWidget(self.results, 1)
        left_layout.addWidget(self.search_status)
        left_layout.addWidget(self.more_button)

        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(self._build_details())
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        layout = QVBoxLayout(page)
        layout.addWidget(splitter)
        return page

    def _build_details(self) -> QWidget:
        pane = QWidget()
        layout = QVBoxLayout(pane)
        layout.setContentsMargins(0, 0, 0, 0)
        self.detail_title = QLabel("Select a model to see its details.", wordWrap=True)
        font = self.detail_title.font()
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.15)
        self.detail_title.setFont(font)
        self.fit_badge = QLabel()
        self.detail_facts = QLabel(wordWrap=True, openExternalLinks=True)
        self.detail_facts.setTextFormat(Qt.TextFormat.RichText)
        self.detail_files = QListWidget(accessibleName="Files")
        self.detail_files.setMaximumHeight(150)
        self.detail_status = QLabel(wordWrap=True)
        self.download_button = QPushButton("Download")
        self.download_button.setToolTip("Download the files a merge needs into the Hugging Face cache (a job)")
        self.download_button.clicked.connect(self._download)
        self.base_button = QPushButton("Use as base")
        self.base_button.clicked.connect(lambda: self.details and self.state.use_as_base.emit(self.details.repo_id))
        self.add_button = QPushButton("Add to merge")
        self.add_button.clicked.connect(lambda: self.details and self.state.add_to_merge.emit(self.details.repo_id))
        self.extract_button = QPushButton("Extract LoRA from this")
        self.extract_button.clicked.connect(self._extract_from_details)
        self.page_button = QPushButton("Open on the Hub")
        self.page_button.clicked.connect(lambda: self.details and QDesktopServices.openUrl(QUrl(self.details.page_url)))
        actions = QHBoxLayout()
        for button in (self.download_button, self.base_button, self.add_button, self.extract_button):
            actions.addWidget(button)
        self._detail_actions = (self.download_button, self.base_button, self.add_button, self.extract_button,
                                self.page_button)
        for widget in (self.detail_title, self.fit_badge, self.detail_facts):
            layout.addWidget(widget)
        layout.addWidget(QLabel("Files"))
        layout.addWidget(self.detail_files)
        layout.addWidget(self.detail_status)
        layout.addLayout(actions)
        layout.addWidget(self.page_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addStretch()
        self._enable_actions(False)
        return pane

    def focus_search(self) -> None:
        self.tabs.setCurrentIndex(0)
        self.search_edit.setFocus()
        self.search_edit.selectAll()

    def search(self) -> None:
        """Start a search for the box's text (debounced; every earlier search becomes stale)."""
        from guiapp.hub.search import ModelSearch, SearchQuery  # noqa: PLC0415

        low, high = SIZE_FILTERS[self.size_combo.currentText()]
        query = SearchQuery(text=self.search_edit.text().strip(), sort=self.sort_combo.currentData(),
                            min_parameters=low, max_parameters=high, gated=False if self.hide_gated.isChecked() else None)
        self._search = self._search or ModelSearch(page_size=30)
        self.search_status.setText("Searching…")
        set_status_style(self.search_status, "muted")
        search = self._search

        def run():
            results = search.start(query)
            return results, results.next_page()

        self._searcher.request(run, self._show_results, self._search_failed)

    def _show_results(self, answer: tuple[Any, list[Any]]) -> None:
        self._results, page = answer
        self.results.setRowCount(0)
        self._add_results(page)

    def _add_results(self, page: list[Any]) -> None:
        for summary in page:
            row = self.results.rowCount()
            self.results.insertRow(row)
            cells = (summary.repo_id, _weights_size(summary.parameters_by_dtype), _count(summary.parameters),
                     f"{summary.downloads:,}", f"{summary.likes:,}",
                     summary.last_modified.strftime("%Y-%m-%d") if summary.last_modified else "",
                     "Gated" if summary.gated else "")
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, summary.repo_id)
                if column == 6 and summary.gated:
                    item.setToolTip("Accept the licence on the model's Hub page (signed in) to download it")
                self.results.setItem(row, column, item)
        count = self.results.rowCount()
        self.search_status.setText(f"{count} models" + ("" if self._results.exhausted else " (more available)")
                                   if count else "No models match. Try fewer words or another filter.")
        set_status_style(self.search_status, None)
        self.more_button.setVisible(not self._results.exhausted and count > 0)

    def _load_more(self) -> None:
        results = self._results
        self._searcher.request(lambda: (results, results.next_page()), lambda answer: self._add_results(answer[1]),
                               self._search_failed)

    def _search_failed(self, error: BaseException) -> None:
        from guiapp.errors import JobCancelled  # noqa: PLC0415

        if isinstance(error, JobCancelled):
            return  # replaced by a newer search
        self.search_status.setText(error_text(error))
        set_status_style(self.search_status, "problem")

    def _result_selected(self) -> None:
        items = self.results.selectedItems()
        if items:
            self.open_details(items[0].data(Qt.ItemDataRole.UserRole))

    def open_details(self, repo_id: str) -> None:
        """Show `repo_id`'s details (one Hub request, on a worker thread) and its fit on this machine."""
        from guiapp.hub.details import model_details  # noqa: PLC0415

        self.detail_title.setText(repo_id)
        self.detail_facts.setText("Loading the details…")
        self.detail_files.clear()
        self.fit_badge.clear()
        self.detail_status.clear()
        self._enable_actions(False)
        probe = self.state.probe

        def load():
            details = model_details(repo_id)
            return details, _model_fit(details.download_size, probe)

        self._detailer.request(load, self._show_details, self._details_failed)

    def _show_details(self, answer: tuple[Any, Any]) -> None:
        from guiapp.system.units import format_bytes  # noqa: PLC0415

        details, fit = answer
        self.details = details
        self.detail_title.setText(details.repo_id)
        by_dtype = ", ".join(f"{_count(n)} {dtype}" for dtype, n in details.parameters_by_dtype.items())
        facts = [
            ("Parameters", f"{_count(details.parameters)} ({by_dtype})" if details.parameters else "unknown "
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
        ]
        self.detail_facts.setText("<table>" + "".join(f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{html_escape(v)}</td></tr>"
                                                      for k, v in facts) + "</table>")
        self.detail_files.clear()
        for file in details.files:
            self.detail_files.addItem(f"{file.name}  ({format_bytes(file.size)})")
        if fit is not None:
            words = {"FITS_ON_GPU": "Fits on the GPU", "FITS_IN_RAM": "Fits in RAM", "TIGHT": "Tight",
                     "WILL_NOT_FIT": "Too large"}[fit.level.name]
            self.fit_badge.setText(f"● {words} for this machine")
            self.fit_badge.setToolTip(fit.summary())
            set_status_style(self.fit_badge, {"WILL_NOT_FIT": "problem", "TIGHT": "warning"}.get(fit.level.name, "good"))
        self._enable_actions(True)
        self.extract_button.setToolTip(f"Extract a LoRA of this model against {details.base_models[0]}"
                                       if details.base_models else "Extract a LoRA of this model (choose its base)")

    def _details_failed(self, error: BaseException) -> None:
        self.detail_facts.setText(html_escape(error_text(error)))
        set_status_style(self.detail_facts, None)

    def _enable_actions(self, enabled: bool) -> None:
        for button in self._detail_actions:
            button.setEnabled(enabled)

    def _extract_from_details(self) -> None:
        if self.details is not None:
            self.state.extract_from.emit(self.details.repo_id, self.details.base_models[0] if self.details.base_models else "")

    def _download(self) -> None:
        from guiapp.jobs.specs import download_job  # noqa: PLC0415

        if self.details is None:
            return
        self.state.jobs.submit(download_job(self.details.repo_id))
        self.detail_status.setText(f"Downloading {self.details.repo_id}: progress on the Jobs page.")
        set_status_style(self.detail_status, "muted")

    # --- downloaded ------------------------------------------------------------------------------------------

    def _build_downloaded(self) -> QWidget:
        page = QWidget()
        self.cache_table = QTableWidget(0, 4, accessibleName="Downloaded models")
        self.cache_table.setHorizontalHeaderLabels(["Model", "Size", "Last used", "Versions"])
        self.cache_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.cache_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.cache_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.cache_table.verticalHeader().setVisible(False)
        self.cache_table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.cache_status = QLabel(wordWrap=True)
        buttons = QHBoxLayout()
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh_cache)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setToolTip("Delete the selected model from the Hugging Face cache")
        self.delete_button.clicked.connect(self._delete_cached)
        cached_base = QPushButton("Use as base")
        cached_base.clicked.connect(lambda: self._hand_over_cached(self.state.use_as_base))
        cached_add = QPushButton("Add to merge")
        cached_add.clicked.connect(lambda: self._hand_over_cached(self.state.add_to_merge))
        for button in (refresh, self.delete_button, cached_base, cached_add):
            buttons.addWidget(button)
        buttons.addStretch()
        layout = QVBoxLayout(page)
        layout.addWidget(self.cache_table, 1)
        layout.addWidget(self.cache_status)
        layout.addLayout(buttons)
        return page

    def refresh_cache(self, note: str = "") -> None:
        """List the cache again; `note` (what was just done) is shown after the totals."""
        from guiapp.hub.cache import scan_cache  # noqa: PLC0415

        self.cache_status.setText("Reading the cache…")
        call_in_background(scan_cache, lambda models: self._show_cache(models, note),
                           lambda e: self.cache_status.setText(error_text(e)))

    def _show_cache(self, models: list[Any], note: str = "") -> None:
        from guiapp.hub.connection import HubConnection  # noqa: PLC0415
        from guiapp.system.units import format_bytes  # noqa: PLC0415

        self.cache_table.setRowCount(0)
        for model in models:
            row = self.cache_table.rowCount()
            self.cache_table.insertRow(row)
            for column, text in enumerate((model.repo_id, format_bytes(model.size),
                                           model.last_used.strftime("%Y-%m-%d %H:%M"), str(len(model.revisions)))):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, model.repo_id)
                self.cache_table.setItem(row, column, item)
        total = sum(m.size for m in models)
        self.cache_status.setText((f"{len(models)} models, {format_bytes(total)} in {HubConnection.current().cache_dir}."
                                   if models else "No models downloaded yet.") + (f" {note}" if note else ""))

    def _selected_cached(self) -> str | None:
        items = self.cache_table.selectedItems()
        return items[0].data(Qt.ItemDataRole.UserRole) if items else None

    def _hand_over_cached(self, signal) -> None:
        if repo_id := self._selected_cached():
            signal.emit(repo_id)

    def _delete_cached(self) -> None:
        from guiapp.hub.cache import plan_deletion  # noqa: PLC0415

        repo_id = self._selected_cached()
        if repo_id:
            call_in_background(lambda: plan_deletion(repo_id), self._confirm_deletion,
                               lambda e: self.cache_status.setText(error_text(e)))

    def _confirm_deletion(self, plan: Any) -> None:
        from guiapp.system.units import format_bytes  # noqa: PLC0415

        question = (f"Delete {plan.repo_id} ({len(plan.commits)} versions) from the cache?\n"
                    f"This frees {format_bytes(plan.freed_bytes)}. You can download it again later.")
        answer = QMessageBox.question(self, "Delete a downloaded model", question)
        if answer == QMessageBox.StandardButton.Yes:
            call_in_background(plan.execute, lambda _: self._deleted(plan), lambda e: self.cache_status.setText(error_text(e)))

    def _deleted(self, plan: Any) -> None:
        from guiapp.system.units import format_bytes  # noqa: PLC0415

        self.refresh_cache(f"Deleted {plan.repo_id}; freed {format_bytes(plan.freed_bytes)}.")

    # --- local folders -------------------------------------------------------------------------------------

    def _build_local(self) -> QWidget:
        page = QWidget()
        self.local_list = QListWidget(accessibleName="Local model folders")
        self.local_status = QLabel("Model folders on this computer (config.json and .safetensors) work offline "
                                   "everywhere a Hub model does.", wordWrap=True)
        buttons = QHBoxLayout()
        add = QPushButton("Add folder…")
        add.clicked.connect(lambda: self.add_local_folder())
        remove = QPushButton("Remove from list")
        remove.setToolTip("Forget the folder; its files stay where they are")
        remove.clicked.connect(self._remove_local)
        local_base = QPushButton("Use as base")
        local_base.clicked.connect(lambda: self._hand_over_local(self.state.use_as_base))
        local_add = self.local_add_button = QPushButton("Add to merge")
        local_add.clicked.connect(lambda: self._hand_over_local(self.state.add_to_merge))
        local_extract = QPushButton("Extract LoRA from this")
        local_extract.clicked.connect(lambda: (folder := self._selected_local()) and self.state.extract_from.emit(folder, ""))
        for button in (add, remove, local_base, local_add, local_extract):
            buttons.addWidget(button)
        buttons.addStretch()
        layout = QVBoxLayout(page)
        layout.addWidget(self.local_list, 1)
        layout.addWidget(self.local_status)
        layout.addLayout(buttons)
        return page

    def refresh_local(self) -> None:
        from guiapp.hub.local_folders import list_local_folders  # noqa: PLC0415

        self.local_list.clear()
        for folder in list_local_folders():
            self.local_list.addItem(str(folder) + ("" if folder.is_dir() else "  (missing)"))

    def add_local_folder(self, folder: str | None = None) -> None:
        from guiapp.errors import MergesmithError  # noqa: PLC0415
        from guiapp.hub.local_folders import add_local_folder  # noqa: PLC0415

        folder = folder or QFileDialog.getExistingDirectory(self, "Add a model folder")
        if not folder:
            return
        try:
            add_local_folder(Path(folder))
        except MergesmithError as error:
            self.local_status.setText(error_text(error))
            set_status_style(self.local_status, "problem")
            return
        set_status_style(self.local_status, None)
        self.local_status.setText(f"Added {folder}.")
        self.refresh_local()

    def _selected_local(self) -> str | None:
        item = self.local_list.currentItem()
        return item.text().removesuffix("  (missing)") if item else None

    def _remove_local(self) -> None:
        from guiapp.hub.local_folders import remove_local_folder  # noqa: PLC0415

        if folder := self._selected_local():
            remove_local_folder(Path(folder))
            self.refresh_local()

    def _hand_over_local(self, signal) -> None:
        if folder := self._selected_local():
            signal.emit(folder)

    def _job_changed(self, key: str) -> None:
        record = self.state.jobs.record(key)
        if record.kind == "download" and record.status == "done" and self.tabs.currentIndex() == 1:
            self.refresh_cache()

    def _tab_changed(self, index: int) -> None:
        if index == 1:
            self.refresh_cache()
        elif index == 2:
            self.refresh_local()


def _model_fit(size: int, probe: Any) -> Any:
    """The fit badge of a model of `size` bytes: against the GPU (when probed) or RAM, and the cache's disk."""
    from guiapp.hub.connection import HubConnection  # noqa: PLC0415
    from guiapp.system.resources import fit_verdict  # noqa: PLC0415

    gpu = next((d["id"] for d in (probe.devices if probe else []) if d["kind"] != "cpu"), None)
    try:
        return fit_verdict(size, size, size, gpu or "cpu", HubConnection.current().cache_dir)
    except Exception:  # no badge rather than no details
        return None


def _weights_size(parameters_by_dtype: dict[str, int]) -> str:
    """The size of the weights ("14.5 GB") from the parameter counts by dtype; "" when the Hub gives none."""
    from guiapp.hub.headers import bytes_per_element  # noqa: PLC0415
    from guiapp.system.units import format_bytes  # noqa: PLC0415

    if not parameters_by_dtype:
        return ""
    # A dtype code the table does not know is counted as 2 bytes, the most common size.
    return format_bytes(sum(count * (bytes_per_element(dtype) or 2) for dtype, count in parameters_by_dtype.items()))


def _count(value: int | None) -> str:
    if not value:
        return ""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)
