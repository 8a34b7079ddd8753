"""Combine LoRAs: several adapters made into one, exactly as PEFT's add_weighted_adapter combines them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.summaries import combine_summary
from guiapp.jobs.validation import PairCheck, check_adapters
from guiapp.system.paths import expanded
from guiapp.system.units import plural
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.lora.form_tab import ReportingTab, out_of_range
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.model_picker import ModelPicker
from guiapp.ui.widgets.param_form import UNBOUNDED, mark_range
from guiapp.ui.widgets.wrapping_label import WrappingLabel

METHODS = {  # PEFT's combination type: what it does, and in a word for the summary line, in the user's words
    "linear": ("Blend their factors (adapters of the same rank)", "blended"),
    "cat": ("Stack them: exactly their weighted sum (the ranks add up)", "stacked"),
    "svd": ("Sum them exactly, then keep the best rank (slower)", "summed, best rank kept"),
    "ties": ("Keep each factor's strongest entries, resolving sign conflicts (same rank)", "strongest entries kept"),
}
DENSITY_RANGE = (0.01, 1.0)
DENSITY_TIP = "The share of each factor's entries ties keeps, e.g. 0.5."


class CombineTab(ReportingTab):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(state, "Combine LoRAs", "combination", combine_summary, parent)
        self.scroll.setWidget(self._build())
        self.run_button.clicked.connect(self.run)
        self._checker = LatestTask(500, self)
        self.picker.use_library(state.library)
        self.density.valueChanged.connect(lambda _: self._density_changed())

    def _build(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.addWidget(WrappingLabel("Combine adapters of one base model into a single adapter, each with its "
                                       "weight."))
        adapters = QGroupBox("Adapters")
        layout = QVBoxLayout(adapters)
        self.table = QTableWidget(0, 2, accessibleName="Adapters to combine")
        self.table.setHorizontalHeaderLabels(["Adapter", "Weight"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setMinimumHeight(120)
        layout.addWidget(self.table)
        row = QHBoxLayout()
        self.picker = ModelPicker("An adapter: org/name or a folder with adapter_config.json", kinds=("adapter",))
        self.add_button = QPushButton("Add")
        self.add_button.clicked.connect(lambda: self.add_adapter(self.picker.text()))
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self._remove_selected)
        row.addWidget(self.picker, 1)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        layout.addLayout(row)
        self.check = WrappingLabel()
        layout.addWidget(self.check)
        column.addWidget(adapters)
        how = QGroupBox("How")
        form = QFormLayout(how)
        self.method = QComboBox(accessibleName="Combination")
        for method, (words, _) in METHODS.items():
            self.method.addItem(words, method)
        self.rank = QSpinBox(accessibleName="Rank", minimum=0, maximum=65536)
        self.rank.setSpecialValueText("the largest of the adapters'")
        self.density = QDoubleSpinBox(accessibleName="Density", minimum=-UNBOUNDED, maximum=UNBOUNDED, decimals=3,
                                      singleStep=0.05, value=0.5, toolTip=DENSITY_TIP)
        form.addRow("Combination", self.method)
        form.addRow("Rank", self.rank)
        form.addRow("Density", self.density)
        self.method.currentIndexChanged.connect(self._method_changed)
        column.addWidget(how)
        output = QGroupBox("Output")
        form = QFormLayout(output)
        self.out, out_row = self.folder_row("lora-adapter-combined")
        self.out.textChanged.connect(self.changed)
        form.addRow("Adapter folder", out_row)
        self.overwrite = QCheckBox("Replace the folder if it already exists")
        self.overwrite.toggled.connect(self.changed)
        form.addRow("", self.overwrite)
        column.addWidget(output)
        column.addWidget(self.report)
        column.addStretch()
        self._method_changed()
        return page

    def add_adapter(self, reference: str, weight: float = 1.0) -> None:
        """Add a row for the adapter `reference` (nothing for an empty one) and check the adapters again."""
        reference = reference.strip()
        if not reference:
            return
        row = self.table.rowCount()
        self.table.insertRow(row)
        item = QTableWidgetItem(reference)
        item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
        self.table.setItem(row, 0, item)
        box = QDoubleSpinBox(accessibleName=f"Weight of {Path(reference).name}", minimum=-UNBOUNDED,
                             maximum=UNBOUNDED, singleStep=0.1, value=weight)
        box.valueChanged.connect(self._describe)
        self.table.setCellWidget(row, 1, box)
        self.picker.set_text("")
        self.changed()

    def _remove_selected(self) -> None:
        for row in sorted({index.row() for index in self.table.selectedIndexes()}, reverse=True):
            self.table.removeRow(row)
        self.changed()

    def adapters(self) -> list[str]:
        return [self.table.item(row, 0).text() for row in range(self.table.rowCount())]

    def weights(self) -> list[float]:
        return [self.table.cellWidget(row, 1).value() for row in range(self.table.rowCount())]

    def _method_changed(self) -> None:
        method = self.method.currentData()
        self.rank.setEnabled(method == "svd")
        self.density.setEnabled(method == "ties")
        self._density_changed()

    def _density_changed(self) -> None:
        mark_range(self.density, self.density.value(), *DENSITY_RANGE, DENSITY_TIP)
        self.number_changed()
        self._describe()

    def number_out_of_range(self):
        if self.method.currentData() != "ties":
            return None
        return out_of_range("Density", self.density, *DENSITY_RANGE)

    def _describe(self, *_: Any) -> None:
        count = self.table.rowCount()
        self.bar.set_summary(f"{plural(count, 'adapter')} {METHODS[self.method.currentData()][1]}"
                             + (f" into {Path(self.out.text().strip()).name}" if self.out.text().strip() else ""))

    def changed(self, *_: Any) -> None:
        """Check the adapters and the output folder again (in the background) and say so."""
        adapters = self.adapters()
        self._describe()
        if len(adapters) < 2:
            self._checker.cancel()
            self.check.clear()
            self.bar.set_waiting("Add at least two adapters.")
            return
        self.check.setText("Checking the adapters…")
        set_status_style(self.check, "muted")
        self.forget_check()
        self.show_checking()
        out, replace = self.out.text().strip(), self.overwrite.isChecked()
        self._checker.request(lambda: self._check(adapters, out, replace))

    async def _check(self, adapters: list[str], out: str, replace: bool) -> None:
        self._show_check(await run_blocking(check_adapters, adapters, out, replace))

    def _show_check(self, check: PairCheck) -> None:
        if self.show_input_problems(check):
            return
        self.check.setText(f"✓ LoRA adapters of {plural(check.matrices, 'module')} in all.")
        set_status_style(self.check, "good")
        self.show_output_check(check)

    def run(self) -> str | None:
        """Start the combination the form describes; its job key, or None when the form is not complete."""
        from guiapp.jobs.specs import combine_job

        if len(self.adapters()) < 2 or not self.out.text().strip():
            self.check.setText("Add at least two adapters and choose the output folder first.")
            set_status_style(self.check, "problem")
            return None
        if self.number_out_of_range() is not None:
            return None  # the bar says which and offers the fix
        method = self.method.currentData()
        job = combine_job(self.adapters(), self.weights(), method, expanded(self.out.text().strip()),
                          rank=(self.rank.value() or None) if method == "svd" else None,
                          density=self.density.value() if method == "ties" else None,
                          overwrite=self.overwrite.isChecked())
        return self.submit(job)

    def form_values(self) -> dict[str, Any]:
        """What the form remembers for the next start."""
        return {"combine_adapters": self.adapters(), "combine_weights": self.weights(),
                "combine_method": self.method.currentData(), "combine_out": self.out.text()}

    def restore(self, form: dict[str, Any]) -> None:
        """Fill the form from what `form_values` remembered (keys missing or of the wrong type are left alone)."""
        if (index := self.method.findData(form.get("combine_method"))) >= 0:
            self.method.setCurrentIndex(index)
        adapters, weights = form.get("combine_adapters"), form.get("combine_weights")
        if isinstance(adapters, list) and isinstance(weights, list) and len(adapters) == len(weights):
            for reference, weight in zip(adapters, weights):
                if isinstance(reference, str) and isinstance(weight, int | float):
                    self.add_adapter(reference, weight)
        if isinstance(form.get("combine_out"), str) and form["combine_out"]:
            self.out.setText(form["combine_out"])
