"""Extract LoRA: a fine-tune minus its base, compressed into a PEFT adapter.

The pair is checked from headers on a worker thread (debounced) and the estimate shown before Run. When an
extraction this tab started finishes, its report (adapter size, what the worst module kept, nearly-empty warning)
appears under the form, until another pair of models is chosen.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from guiapp.facts.dtypes import ADAPTER_WRITABLE
from guiapp.jobs.summaries import extraction_report
from guiapp.jobs.validation import PairCheck, check_pair
from guiapp.system.paths import expanded
from guiapp.system.units import plural
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.lora.form_tab import ReportingTab, out_of_range
from guiapp.ui.lora.modules_box import ModulesBox
from guiapp.ui.text import sentence
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.model_picker import ModelPicker
from guiapp.ui.widgets.options import OptionCombo
from guiapp.ui.widgets.param_form import UNBOUNDED, mark_range
from guiapp.ui.widgets.spectrum_chart import ModuleEnergyChart, RankPreview
from guiapp.ui.widgets.wrapping_label import WrappingLabel

# What the estimate line says until the models it describes are chosen.
ESTIMATE_HINT = "Choose both models to see the estimate."
RANK_MODES = {  # mode: (label, minimum, maximum, step, decimals, default, help)
    "fixed": ("Fixed rank", 1, 4096, 1, 0, 32, "The same rank for every module."),
    "energy": ("Keep energy", 0.01, 1.0, 0.01, 3, 0.9, "Per module, the smallest rank keeping this fraction of "
               "the fine-tune's change."),
    "threshold": ("Threshold", 0.001, 0.999, 0.01, 3, 0.05, "Per module, keep directions at least this fraction "
                  "as strong as the strongest."),
}


class ExtractTab(ReportingTab):
    JOB = "extract"
    DTYPES = ADAPTER_WRITABLE
    DEFAULT_DTYPE = "Same as the fine-tune"

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(state, "Extract LoRA", "extraction", extraction_report, parent)
        self._report_pair: tuple[str, str] | None = None  # the (base, fine-tune) the shown report is about
        self.scroll.setWidget(self._build())
        self.run_button.clicked.connect(self.run)
        self._checker = LatestTask(500, self)
        state.jobs.record_added.connect(self._follow_retry)
        for picker in (self.base, self.model):
            picker.use_library(state.library)
        # The estimate depends on how the matrices are decomposed: a change of these checks the pair again.
        for signal in (self.rank_mode.currentIndexChanged, self.rank_value.valueChanged, self.max_rank.valueChanged,
                       self.solver.currentIndexChanged, self.modules.embeddings.currentIndexChanged):
            signal.connect(self.changed)
        self.rank_value.valueChanged.connect(lambda _: self._rank_value_changed())
        self.overwrite.toggled.connect(self.changed)

    def _build(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.addWidget(WrappingLabel("Turn a fine-tuned model into a small LoRA adapter: the difference from its "
                                       "base model, compressed."))
        column.addWidget(self._build_models())
        column.addWidget(self._build_rank())
        self.modules = ModulesBox()
        column.addWidget(self.modules)
        column.addWidget(self._build_output())
        self.estimate = WrappingLabel(ESTIMATE_HINT)
        column.addWidget(self.estimate)
        column.addWidget(self.report)
        self.report_chart = ModuleEnergyChart()
        column.addWidget(self.report_chart)
        column.addStretch()
        return page

    def _build_models(self) -> QGroupBox:
        models = QGroupBox("Models")
        form = QFormLayout(models)
        self.base = ModelPicker("The base model the fine-tune started from")
        self.model = ModelPicker("The fine-tuned model")
        for picker in (self.base, self.model):
            picker.changed.connect(self.changed)
        form.addRow("Base model", self.base)
        form.addRow("Fine-tuned model", self.model)
        self.check = WrappingLabel()
        form.addRow("", self.check)
        return models

    def _build_rank(self) -> QGroupBox:
        rank = QGroupBox("Rank")
        form = QFormLayout(rank)
        self.rank_mode = QComboBox(accessibleName="Rank mode")
        for mode, spec in RANK_MODES.items():
            self.rank_mode.addItem(spec[0], mode)
            self.rank_mode.setItemData(self.rank_mode.count() - 1, spec[6], Qt.ItemDataRole.ToolTipRole)
        # Any number is kept as typed (a box clamping 1.5 to 1 would hide the mistake); one outside the mode's range
        # is marked and blocks Extract, with the nearest allowed value as its fix.
        self.rank_value = QDoubleSpinBox(accessibleName="Rank value", minimum=-UNBOUNDED, maximum=UNBOUNDED)
        self.rank_mode.currentIndexChanged.connect(self._rank_mode_changed)
        self.max_rank = QSpinBox(accessibleName="Maximum rank", minimum=0, maximum=65536)
        self.max_rank.setSpecialValueText("no limit")
        self.solver = QComboBox(accessibleName="Solver")
        self.solver.addItem("Fast (randomized, within 2 % of the best)", "randomized")
        self.solver.addItem("Exact (full SVD, slower)", "exact")
        form.addRow("Rank mode", self.rank_mode)
        form.addRow("Value", self.rank_value)
        form.addRow("Maximum rank", self.max_rank)
        form.addRow("Solver", self.solver)
        self.rank_preview = RankPreview()  # the curve of what each rank keeps; a click there sets the rank
        self.rank_preview.rank_chosen.connect(self._use_rank)
        self.rank_value.valueChanged.connect(lambda value: self.rank_preview.show_rank(
            int(value) if self.rank_mode.currentData() == "fixed" else None))
        form.addRow(self.rank_preview)
        self._rank_mode_changed()
        return rank

    def _build_output(self) -> QGroupBox:
        output = QGroupBox("Output")
        form = QFormLayout(output)
        self.device, self.dtype = OptionCombo(), OptionCombo()
        self.device.setAccessibleName("Device")
        self.dtype.setAccessibleName("Adapter dtype")
        self.device.choice_changed.connect(lambda _: self.refresh_capabilities())
        self.device.choice_changed.connect(lambda _: self.changed())
        form.addRow("Device", self.device)
        form.addRow("Adapter dtype", self.dtype)
        form.addRow("", WrappingLabel("The decomposition is always computed in float32."))
        self.out, out_row = self.folder_row("lora-adapter")
        self.out.textChanged.connect(self.changed)
        form.addRow("Adapter folder", out_row)
        self.overwrite = QCheckBox("Replace the folder if it already exists")
        form.addRow("", self.overwrite)
        return output

    def _rank_mode_changed(self) -> None:
        _, low, high, step, decimals, default, tip = RANK_MODES[self.rank_mode.currentData()]
        self.rank_value.setDecimals(decimals)
        self.rank_value.setSingleStep(step)
        self.rank_value.setValue(default)
        mark_range(self.rank_value, self.rank_value.value(), low, high, tip)

    def _rank_value_changed(self) -> None:
        _, low, high, *_, tip = RANK_MODES[self.rank_mode.currentData()]
        mark_range(self.rank_value, self.rank_value.value(), low, high, tip)
        self.number_changed()

    def number_out_of_range(self):
        label, low, high = RANK_MODES[self.rank_mode.currentData()][:3]
        return out_of_range(label, self.rank_value, low, high)

    def set_models(self, model: str, base: str | None = None) -> None:
        """Pre-fill the fine-tune, and its base when known."""
        self.model.set_text(model)
        if base:
            self.base.set_text(base)

    def _describe(self, *_: Any, time: str = "") -> None:
        """The extraction's summary line: the rank, the fine-tune, the adapter folder's name, the time."""
        mode = self.rank_mode.currentData()
        rank = (f"Rank {int(self.rank_value.value())}" if mode == "fixed" else
                f"{RANK_MODES[mode][0]} {self.rank_value.value():g}")
        parts = [rank, f"from {Path(self.model.text()).name or 'the fine-tune'}"]
        if self.out.text().strip():
            parts.append(f"into {Path(self.out.text().strip()).name}")
        self.bar.set_summary(" · ".join(parts + ([time] if time else [])))

    def _use_rank(self, rank: int) -> None:
        """A rank clicked on the preview: a fixed rank of that value."""
        self.rank_mode.setCurrentIndex(self.rank_mode.findData("fixed"))
        self.rank_value.setValue(rank)

    def changed(self, *_: Any) -> None:
        """Check the pair again (in the background) and say so; clears what described other models."""
        base, model = self.base.text(), self.model.text()
        self._describe()
        if self._report_pair is not None and self._report_pair != (base, model):
            self._report_pair = self._job_key = None  # the report was about other models
            self.report.clear()
            self.report_chart.show_summary(None)
        self.rank_preview.set_pair(base, model)
        self.modules.list_modules_of(base)
        if not (base and model):
            self._checker.cancel()  # a check still running for the models no longer chosen is dropped
            self.check.clear()
            self.estimate.setText(ESTIMATE_HINT)
            self.bar.set_waiting("Choose the base model and the fine-tuned model first.")
            return
        self.check.setText("Checking the models…")
        set_status_style(self.check, "muted")
        self.forget_check()
        self.show_checking()
        device, out, probe = self.device.value() or "cpu", self.out.text().strip(), self.state.probe
        replace = self.overwrite.isChecked()
        mode = self.rank_mode.currentData()
        options = {"rank_mode": mode, "rank_value": rank_value(mode, self.rank_value.value()),
                   "max_rank": self.max_rank.value() or None, "solver": self.solver.currentData(),
                   "embeddings": self.modules.embeddings.currentData()}
        self._checker.request(lambda: self._check_pair(base, model, device, out, probe, replace, options))

    async def _check_pair(self, base: str, model: str, device: str, out: str, probe: Any, replace: bool,
                          options: dict[str, Any]) -> None:
        self._show_check(await run_blocking(partial(check_pair, **options), base, model, device, out, probe, replace))

    def _show_check(self, check: PairCheck) -> None:
        from guiapp.system.units import format_bytes

        if self.show_input_problems(check):
            self.estimate.setText("The estimate appears once both models can be read.")
            return
        self.show_output_check(check)
        self._describe(time=str(check.time) if check.time is not None else "")
        self.check.setText(f"✓ These models pair up: {plural(check.matrices, 'weight matrix', 'weight matrices')} "
                           "to compare.")
        set_status_style(self.check, "good")
        lines = [f"Reads {format_bytes(check.read_bytes)}."]
        if check.fit is not None:
            lines.append(f"{sentence(check.fit.level.value)}: about {format_bytes(check.fit.peak_ram)} of RAM "
                         f"at most; {format_bytes(check.fit.disk_free)} free for the adapter.")
        if check.time is not None:
            lines.append(f"Time: {check.time}.")
        self.estimate.setText("\n".join(lines))

    def run(self) -> str | None:
        """Start the extraction the form describes; its job key, or None when the form is not complete."""
        from guiapp.jobs.specs import extract_job

        if not (self.base.text() and self.model.text() and self.out.text().strip()):
            self.check.setText("Choose the base model, the fine-tuned model and the adapter folder first.")
            set_status_style(self.check, "problem")
            return None
        if self.number_out_of_range() is not None:
            return None  # the bar says which and offers the fix
        mode = self.rank_mode.currentData()
        job = extract_job(
            self.base.text(), self.model.text(), expanded(self.out.text().strip()),
            rank_mode=mode, rank_value=rank_value(mode, self.rank_value.value()),
            max_rank=self.max_rank.value() or None, solver=self.solver.currentData(),
            include=self.modules.include.text().strip() or None, exclude=self.modules.exclude.text().strip() or None,
            embeddings=self.modules.embeddings.currentData(), dtype=self.dtype.value(),
            device=self.device.value() or "cpu", overwrite=self.overwrite.isChecked(),
        )
        self._report_pair = (self.base.text(), self.model.text())
        self.report_chart.show_summary(None)
        return self.submit(job)

    def _follow_retry(self, key: str) -> None:
        """A retry of the extraction the report follows is that extraction now: its end is what the report says."""
        record = self.state.jobs.record(key)
        if record is not None and self._job_key is not None and record.retry_of == self._job_key:
            self._job_key = key
            self.report.setText("Running again… (progress on the Jobs page)")
            set_status_style(self.report, "muted")

    def show_result(self, summary: dict) -> None:
        report = extraction_report(summary)
        self.report.setText(report)
        self.report_chart.show_summary(summary)
        set_status_style(self.report, "warning" if "Warning" in report else None)

    def form_values(self) -> dict[str, Any]:
        """What the form remembers for the next start, by the keys form memory has always used."""
        return {"x_base": self.base.text(), "x_model": self.model.text(), "rank_mode": self.rank_mode.currentData(),
                "rank_value": self.rank_value.value(), "max_rank": self.max_rank.value(),
                "solver": self.solver.currentData(), "include": self.modules.include.text(),
                "exclude": self.modules.exclude.text(), "embeddings": self.modules.embeddings.currentData(),
                "x_out": self.out.text()}

    def restore(self, form: dict[str, Any]) -> None:
        """Fill the form from what `form_values` remembered (keys missing or of the wrong type are left alone)."""
        for combo, key in ((self.rank_mode, "rank_mode"), (self.solver, "solver"),
                           (self.modules.embeddings, "embeddings")):
            if (index := combo.findData(form.get(key))) >= 0:
                combo.setCurrentIndex(index)  # the rank mode first: choosing it resets the rank value
        for spin, key in ((self.rank_value, "rank_value"), (self.max_rank, "max_rank")):
            if isinstance(form.get(key), int | float):
                spin.setValue(form[key])
        texts = {"x_base": self.base.set_text, "x_model": self.model.set_text, "include": self.modules.include.setText,
                 "exclude": self.modules.exclude.setText, "x_out": self.out.setText}
        for key, set_text in texts.items():
            if isinstance(form.get(key), str) and form[key]:
                set_text(form[key])
        self.modules.show_choice_when_set()


def rank_value(mode: str, value: float) -> float:
    """The rank value as the rank rule takes it: a whole number for a fixed rank."""
    return int(value) if mode == "fixed" else value
