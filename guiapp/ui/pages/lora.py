"""The LoRA page: Extract LoRA (fine-tune − base → adapter), Apply LoRA (base + adapter → full model), Resize LoRA
(a smaller adapter) and Combine LoRAs (several adapters → one), a tab each.

Both forms take their device and dtype dropdowns from the probe, check the models from their headers on a worker
thread (debounced) and show the estimate before Run. Each tab's action bar (below its scroll area, always in sight)
holds the Run button, disabled with the reason while the models are checked or do not fit, and a one-line summary.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QTabWidget, QVBoxLayout, QWidget

from guiapp.ui.lora.apply_tab import ApplyTab
from guiapp.ui.lora.combine_tab import CombineTab
from guiapp.ui.lora.extract_tab import ExtractTab
from guiapp.ui.lora.resize_tab import ResizeTab


class LoraPage(QWidget):
    job_submitted = Signal(str)

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.extract, self.apply = ExtractTab(state), ApplyTab(state)
        self.resize_tab, self.combine = ResizeTab(state), CombineTab(state)
        self.tabs = QTabWidget()
        for tab, title in ((self.extract, "Extract LoRA"), (self.apply, "Apply LoRA"), (self.resize_tab, "Resize"),
                           (self.combine, "Combine")):
            self.tabs.addTab(tab, title)
            tab.job_submitted.connect(self.job_submitted)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        state.probe_ready.connect(lambda _: self._refresh_capabilities())
        state.checks_outdated.connect(self.recheck)
        self._refresh_capabilities()
        self._restore_form()
        self.recheck()

    def set_extract_models(self, model: str, base: str | None = None) -> None:
        """Pre-fill from the library ("Extract LoRA from this"): the fine-tune, and its base when known."""
        self.tabs.setCurrentWidget(self.extract)
        self.extract.set_models(model, base)

    def save_form(self) -> None:
        """Keep every form for the next start (never the Replace choices, which are made each time)."""
        from guiapp.jobs.form_memory import remember_form

        remember_form("lora", {key: value for tab in self._tabs() for key, value in tab.form_values().items()})

    def _restore_form(self) -> None:
        from guiapp.jobs.form_memory import remembered_form

        form = remembered_form("lora")
        for tab in self._tabs():
            tab.restore(form)

    def recheck(self) -> None:
        """Check every form again (what they depend on outside the page changed: a sign-in, offline mode, a job's
        end, the library)."""
        for tab in self._tabs():
            tab.changed()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        """A folder may have appeared or gone while another page (or program) was in front: check again."""
        super().showEvent(event)
        self.recheck()

    def _refresh_capabilities(self) -> None:
        for tab in self._tabs():
            tab.refresh_capabilities()

    def _tabs(self) -> tuple:
        return self.extract, self.apply, self.resize_tab, self.combine
