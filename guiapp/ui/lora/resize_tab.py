"""Resize LoRA: an adapter made smaller, each module replaced by its best approximation of a lower rank (or by the
fewest directions keeping a share of its change). The report shows what each module kept, as the extraction's does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox, QVBoxLayout, QWidget

from guiapp.jobs.summaries import resize_summary
from guiapp.jobs.validation import PairCheck, check_adapters
from guiapp.system.paths import expanded
from guiapp.system.units import plural
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.lora.form_tab import ReportingTab, out_of_range
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.model_picker import ModelPicker
from guiapp.ui.widgets.param_form import UNBOUNDED, mark_range
from guiapp.ui.widgets.spectrum_chart import ModuleEnergyChart
from guiapp.ui.widgets.wrapping_label import WrappingLabel

SIZE_MODES = {  # mode: (label, minimum, maximum, step, decimals, default, help)
    "rank": ("Rank", 1, 4096, 1, 0, 8, "Every module keeps at most this rank."),
    "energy": ("Keep energy", 0.01, 1.0, 0.01, 3, 0.9, "Per module, the fewest directions keeping this share of "
               "its change."),
}


class ResizeTab(ReportingTab):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(state, "Resize LoRA", "resize", resize_summary, parent)
        self.scroll.setWidget(self._build())
        self.run_button.clicked.connect(self.run)
        self._checker = LatestTask(500, self)
        self.adapter.use_library(state.library)
        self.value.valueChanged.connect(lambda _: self._value_changed())

    def _build(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.addWidget(WrappingLabel("Make an adapter smaller: each module keeps its most important directions, "
                                       "so it changes the model almost as much with fewer numbers."))
        adapter = QGroupBox("Adapter")
        form = QFormLayout(adapter)
        self.adapter = ModelPicker("The adapter: org/name or a folder with adapter_config.json", kinds=("adapter",))
        self.adapter.changed.connect(self.changed)
        form.addRow("Adapter", self.adapter)
        self.check = WrappingLabel()
        form.addRow("", self.check)
        column.addWidget(adapter)
        size = QGroupBox("New size")
        form = QFormLayout(size)
        self.mode = QComboBox(accessibleName="Size by")
        for mode, spec in SIZE_MODES.items():
            self.mode.addItem(spec[0], mode)
            self.mode.setItemData(self.mode.count() - 1, spec[6], Qt.ItemDataRole.ToolTipRole)
        self.value = QDoubleSpinBox(accessibleName="Size value", minimum=-UNBOUNDED, maximum=UNBOUNDED)
        self.mode.currentIndexChanged.connect(self._mode_changed)
        form.addRow("Size by", self.mode)
        form.addRow("Value", self.value)
        self._mode_changed()
        column.addWidget(size)
        output = QGroupBox("Output")
        form = QFormLayout(output)
        self.out, out_row = self.folder_row("lora-adapter-smaller")
        self.out.textChanged.connect(self.changed)
        form.addRow("Adapter folder", out_row)
        self.overwrite = QCheckBox("Replace the folder if it already exists")
        self.overwrite.toggled.connect(self.changed)
        form.addRow("", self.overwrite)
        column.addWidget(output)
        column.addWidget(self.report)
        self.report_chart = ModuleEnergyChart()
        column.addWidget(self.report_chart)
        column.addStretch()
        return page

    def _mode_changed(self) -> None:
        _, low, high, step, decimals, default, tip = SIZE_MODES[self.mode.currentData()]
        self.value.setDecimals(decimals)
        self.value.setSingleStep(step)
        self.value.setValue(default)
        mark_range(self.value, self.value.value(), low, high, tip)

    def _value_changed(self) -> None:
        _, low, high, *_, tip = SIZE_MODES[self.mode.currentData()]
        mark_range(self.value, self.value.value(), low, high, tip)
        self.number_changed()
        self._describe()

    def number_out_of_range(self):
        label, low, high = SIZE_MODES[self.mode.currentData()][:3]
        return out_of_range(label, self.value, low, high)

    def _describe(self) -> None:
        mode = self.mode.currentData()
        size = f"rank {int(self.value.value())}" if mode == "rank" else f"keep {self.value.value():.0%} of each module"
        name = Path(self.adapter.text()).name or "The adapter"
        self.bar.set_summary(f"{name} → {size}" + (f" into {Path(self.out.text().strip()).name}"
                                                    if self.out.text().strip() else ""))

    def changed(self, *_: Any) -> None:
        """Check the adapter and the output folder again (in the background) and say so."""
        adapter = self.adapter.text()
        self._describe()
        if not adapter:
            self._checker.cancel()
            self.check.clear()
            self.bar.set_waiting("Choose the adapter first.")
            return
        self.check.setText("Checking the adapter…")
        set_status_style(self.check, "muted")
        self.forget_check()
        self.show_checking()
        out, replace = self.out.text().strip(), self.overwrite.isChecked()
        self._checker.request(lambda: self._check(adapter, out, replace))

    async def _check(self, adapter: str, out: str, replace: bool) -> None:
        self._show_check(await run_blocking(check_adapters, [adapter], out, replace))

    def _show_check(self, check: PairCheck) -> None:
        if self.show_input_problems(check):
            return
        self.check.setText(f"✓ A LoRA adapter of {plural(check.matrices, 'module')}.")
        set_status_style(self.check, "good")
        self.show_output_check(check)

    def run(self) -> str | None:
        """Start the resize the form describes; its job key, or None when the form is not complete."""
        from guiapp.jobs.specs import resize_job

        if not (self.adapter.text() and self.out.text().strip()):
            self.check.setText("Choose the adapter and the output folder first.")
            set_status_style(self.check, "problem")
            return None
        if self.number_out_of_range() is not None:
            return None  # the bar says which and offers the fix
        by_rank = self.mode.currentData() == "rank"
        job = resize_job(self.adapter.text(), expanded(self.out.text().strip()),
                         rank=int(self.value.value()) if by_rank else None,
                         energy=None if by_rank else self.value.value(), overwrite=self.overwrite.isChecked())
        self.report_chart.show_summary(None)
        return self.submit(job)

    def show_result(self, summary: dict) -> None:
        super().show_result(summary)
        self.report_chart.show_summary(summary)

    def form_values(self) -> dict[str, Any]:
        """What the form remembers for the next start."""
        return {"resize_adapter": self.adapter.text(), "resize_mode": self.mode.currentData(),
                "resize_value": self.value.value(), "resize_out": self.out.text()}

    def restore(self, form: dict[str, Any]) -> None:
        """Fill the form from what `form_values` remembered (keys missing or of the wrong type are left alone)."""
        if (index := self.mode.findData(form.get("resize_mode"))) >= 0:
            self.mode.setCurrentIndex(index)  # first: choosing a mode resets the value
        if isinstance(form.get("resize_value"), int | float):
            self.value.setValue(form["resize_value"])
        for key, set_text in {"resize_adapter": self.adapter.set_text, "resize_out": self.out.setText}.items():
            if isinstance(form.get(key), str) and form[key]:
                set_text(form[key])
