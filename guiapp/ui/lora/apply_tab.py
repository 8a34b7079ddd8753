"""Apply LoRA: a base model with an adapter baked in, written as a full model folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QFormLayout, QGroupBox, QVBoxLayout, QWidget

from guiapp.facts.dtypes import WRITABLE
from guiapp.jobs.validation import PairCheck, check_adapter
from guiapp.system.paths import expanded
from guiapp.system.units import plural
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.lora.form_tab import FormTab, out_of_range
from guiapp.ui.text import sentence
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.model_picker import ModelPicker
from guiapp.ui.widgets.options import OptionCombo
from guiapp.ui.widgets.param_form import UNBOUNDED, mark_range
from guiapp.ui.widgets.wrapping_label import WrappingLabel

ESTIMATE_HINT = "Choose the base model and the adapter to see the estimate."
SCALE_RANGE = (-10.0, 10.0)
SCALE_TIP = "1 applies the adapter as trained; 0.5 half its effect."


class ApplyTab(FormTab):
    JOB = "apply"
    DTYPES = WRITABLE
    DEFAULT_DTYPE = "Same as the base model"
    job_submitted = Signal(str)

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(state, "Apply LoRA", parent)
        self._filled_base = ""  # the base last filled in from an adapter's own config
        self.scroll.setWidget(self._build())
        self.run_button.clicked.connect(self.run)
        self._checker = LatestTask(500, self)
        for picker in (self.base, self.adapter):
            picker.use_library(state.library)
        self.scale.valueChanged.connect(self._describe)
        self.scale.valueChanged.connect(lambda _: self._scale_changed())
        self.overwrite.toggled.connect(self.changed)

    def _build(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.addWidget(WrappingLabel("Bake a LoRA adapter into its base model, giving a full model folder."))
        models = QGroupBox("Models")
        form = QFormLayout(models)
        self.base = ModelPicker("The base model the adapter was trained on")
        self.adapter = ModelPicker("The adapter: org/name or a folder with adapter_config.json", kinds=("adapter",))
        self.adapter.changed.connect(self._fill_base_of_adapter)
        for picker in (self.base, self.adapter):
            picker.changed.connect(self.changed)
        form.addRow("Base model", self.base)
        form.addRow("Adapter", self.adapter)
        self.scale = QDoubleSpinBox(accessibleName="Scale", minimum=-UNBOUNDED, maximum=UNBOUNDED, singleStep=0.1,
                                    value=1.0, toolTip=SCALE_TIP)
        form.addRow("Strength", self.scale)
        self.check = WrappingLabel()
        form.addRow("", self.check)
        column.addWidget(models)
        output = QGroupBox("Output")
        form = QFormLayout(output)
        self.device, self.dtype = OptionCombo(), OptionCombo()
        self.device.setAccessibleName("Device")
        self.dtype.setAccessibleName("Model dtype")
        self.device.choice_changed.connect(lambda _: self.refresh_capabilities())
        form.addRow("Device", self.device)
        form.addRow("Model dtype", self.dtype)
        self.out, out_row = self.folder_row("model-with-lora")
        self.out.textChanged.connect(self.changed)
        form.addRow("Model folder", out_row)
        self.overwrite = QCheckBox("Replace the folder if it already exists")
        form.addRow("", self.overwrite)
        column.addWidget(output)
        self.estimate = WrappingLabel(ESTIMATE_HINT)
        column.addWidget(self.estimate)
        column.addStretch()
        return page

    def _scale_changed(self) -> None:
        mark_range(self.scale, self.scale.value(), *SCALE_RANGE, SCALE_TIP)
        self.number_changed()

    def number_out_of_range(self):
        return out_of_range("Strength", self.scale, *SCALE_RANGE)

    def _fill_base_of_adapter(self, adapter: str) -> None:
        """Fill the base model in from the adapter's own config, unless the user chose another base."""
        from guiapp.jobs.library import adapter_base

        adapter = adapter.strip()
        entry = self.state.library.find(adapter) if adapter else None
        base = entry.base_model if entry else adapter_base(adapter) if adapter and Path(adapter).is_dir() else None
        if base and self.base.text() in ("", self._filled_base):
            self._filled_base = base
            self.base.set_text(base)

    def _describe(self, *_: Any, time: str = "") -> None:
        """The application's summary line: the adapter, the base, the strength, the output folder's name, the
        time."""
        adapter, base = Path(self.adapter.text()).name or "The adapter", Path(self.base.text()).name
        parts = [f"{adapter} onto {base or 'its base model'}", f"strength {self.scale.value():g}"]
        if self.out.text().strip():
            parts.append(f"into {Path(self.out.text().strip()).name}")
        self.bar.set_summary(" · ".join(parts + ([time] if time else [])))

    def changed(self, *_: Any) -> None:
        """Check the adapter against the base again (in the background) and say so."""
        base, adapter = self.base.text(), self.adapter.text()
        self._describe()
        if not (base and adapter):
            self._checker.cancel()
            self.check.clear()
            self.estimate.setText(ESTIMATE_HINT)
            self.bar.set_waiting("Choose the base model and the adapter first.")
            return
        self.check.setText("Checking the adapter against the base model…")
        set_status_style(self.check, "muted")
        self.forget_check()
        self.show_checking()
        device, out, replace = self.device.value() or "cpu", self.out.text().strip(), self.overwrite.isChecked()
        probe = self.state.probe
        self._checker.request(lambda: self._check_adapter(base, adapter, device, out, replace, probe))

    async def _check_adapter(self, base: str, adapter: str, device: str, out: str, replace: bool, probe: Any) -> None:
        self._show_check(await run_blocking(check_adapter, base, adapter, device, out, replace, probe))

    def _show_check(self, check: PairCheck) -> None:
        from guiapp.system.units import format_bytes

        if self.show_input_problems(check):
            self.estimate.setText("The estimate appears once the adapter fits the base model.")
            return
        self.show_output_check(check)
        self._describe(time=str(check.time) if check.time is not None else "")
        self.check.setText(f"✓ The adapter fits this base model ({plural(check.matrices, 'module')} changed).")
        set_status_style(self.check, "good")
        lines = [f"Reads and writes about {format_bytes(check.read_bytes)}."]
        if check.fit is not None:
            lines.append(f"{sentence(check.fit.level.value)}: {check.fit.reason}.")
        if check.time is not None:
            lines.append(f"Time: {check.time}.")
        self.estimate.setText("\n".join(lines))

    def run(self) -> str | None:
        """Start the application the form describes; its job key, or None when the form is not complete."""
        from guiapp.jobs.specs import apply_job

        if not (self.base.text() and self.adapter.text() and self.out.text().strip()):
            self.check.setText("Choose the base model, the adapter and the output folder first.")
            set_status_style(self.check, "problem")
            return None
        if self.number_out_of_range() is not None:
            return None  # the bar says which and offers the fix
        job = apply_job(self.base.text(), self.adapter.text(), expanded(self.out.text().strip()),
                        scale=self.scale.value(), dtype=self.dtype.value(), device=self.device.value() or "cpu",
                        overwrite=self.overwrite.isChecked())
        record = self.state.jobs.submit(job)
        self.job_submitted.emit(record.key)
        return record.key

    def form_values(self) -> dict[str, Any]:
        """What the form remembers for the next start, by the keys form memory has always used."""
        return {"a_base": self.base.text(), "a_adapter": self.adapter.text(), "a_scale": self.scale.value(),
                "a_out": self.out.text()}

    def restore(self, form: dict[str, Any]) -> None:
        """Fill the form from what `form_values` remembered (keys missing or of the wrong type are left alone)."""
        if isinstance(form.get("a_scale"), int | float):
            self.scale.setValue(form["a_scale"])
        for key, set_text in {"a_base": self.base.set_text, "a_adapter": self.adapter.set_text,
                              "a_out": self.out.setText}.items():
            if isinstance(form.get(key), str) and form[key]:
                set_text(form[key])
