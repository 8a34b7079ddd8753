"""The LoRA page: Extract LoRA (fine-tune − base → adapter) and Apply LoRA (base + adapter → full model).

Both forms take their device and dtype dropdowns from the probe, check the models from their headers on a
worker thread (debounced) and show the estimate before Run. Each tab's action bar (below its scroll area, always in
sight) holds the Run button, disabled with the reason while the models are checked or do not fit, and a one-line
summary. When an extraction this page started finishes, its report (adapter size, retained energy, worst modules,
nearly-empty warning) appears under the form, until another pair of models is chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.fixes import window_text
from guiapp.jobs.plain_words import recipe_words
from guiapp.jobs.runner import JobStatus
from guiapp.jobs.summaries import extraction_report
from guiapp.jobs.validation import PairCheck, Problem, check_adapter, check_pair, free_output
from guiapp.system.paths import expanded
from guiapp.system.units import plural
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.merge.output_box import default_output_folder
from guiapp.ui.text import error_text, sentence
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.action_bar import ActionBar
from guiapp.ui.widgets.model_picker import ModelPicker
from guiapp.ui.widgets.options import OptionCombo, device_choices, dtype_choices
from guiapp.ui.widgets.param_form import UNBOUNDED, mark_range, nearest_allowed
from guiapp.ui.widgets.spectrum_chart import ModuleEnergyChart, RankPreview
from guiapp.ui.widgets.wrapping_label import WrappingLabel

ADAPTER_DTYPES = ("bfloat16", "float16", "float32")
# What the estimate and module lines say until the models they describe are chosen.
X_ESTIMATE_HINT = "Choose both models to see the estimate."
A_ESTIMATE_HINT = "Choose the base model and the adapter to see the estimate."
MODULES_HINT = "Choose the base model to list its modules. With none ticked, every changed module is extracted."
MODEL_DTYPES = ("bfloat16", "float16", "float32", "float64")
OUTPUT_KEY = ("output",)  # the key of a check's problems with the output folder
RANK_MODES = {  # mode: (label, minimum, maximum, step, decimals, default, help)
    "fixed": ("Fixed rank", 1, 4096, 1, 0, 32, "The same rank for every module."),
    "energy": ("Keep energy", 0.01, 1.0, 0.01, 3, 0.9, "Per module, the smallest rank keeping this fraction of "
               "the fine-tune's change."),
    "threshold": ("Threshold", 0.001, 0.999, 0.01, 3, 0.05, "Per module, keep directions at least this fraction "
                  "as strong as the strongest."),
}
SCALE_RANGE = (-10.0, 10.0)
SCALE_TIP = "1 applies the adapter as trained; 0.5 half its effect."


class LoraPage(QWidget):
    job_submitted = Signal(str)

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._extract_key: str | None = None
        self._filled_base = ""  # the Apply base last filled in from an adapter's own config
        self._report_pair: tuple[str, str] | None = None  # the (base, fine-tune) the shown report is about
        self.x_bar, self.a_bar = ActionBar("Extract LoRA"), ActionBar("Apply LoRA")
        self.x_run, self.a_run = self.x_bar.button, self.a_bar.button
        self.x_run.clicked.connect(self.run_extract)
        self.a_run.clicked.connect(self.run_apply)
        self.tabs = QTabWidget()
        self.extract_scroll = self._scrolled(self._build_extract())
        self.tabs.addTab(self._with_bar(self.extract_scroll, self.x_bar), "Extract LoRA")
        self.tabs.addTab(self._with_bar(self._scrolled(self._build_apply()), self.a_bar), "Apply LoRA")
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        self._checker = LatestTask(500, self)
        self._apply_checker = LatestTask(500, self)
        state.probe_ready.connect(lambda _: self._refresh_capabilities())
        state.jobs.record_changed.connect(self._job_changed)
        state.jobs.record_added.connect(self._follow_retry)
        state.checks_outdated.connect(self.recheck)
        for picker in (self.x_base, self.x_model, self.a_base, self.a_adapter):
            picker.use_library(state.library)
        # The estimate depends on how the matrices are decomposed: a change of these checks the pair again.
        for signal in (self.rank_mode.currentIndexChanged, self.rank_value.valueChanged, self.max_rank.valueChanged,
                       self.solver.currentIndexChanged, self.embeddings.currentIndexChanged):
            signal.connect(self._extract_changed)
        self.a_scale.valueChanged.connect(self._describe_apply)
        # What each bar's fix button does (a number back in range, a free output folder), and each form's last
        # check of its models (None while there is none, or it found a problem with them).
        self._fixes: dict[ActionBar, Callable[[], None] | None] = {self.x_bar: None, self.a_bar: None}
        self._checks: dict[ActionBar, PairCheck | None] = {self.x_bar: None, self.a_bar: None}
        for bar in (self.x_bar, self.a_bar):
            bar.fix_button.clicked.connect(lambda _=False, bar=bar: self._fixes[bar] and self._fixes[bar]())
        self.rank_value.valueChanged.connect(lambda _: self._number_changed(self.x_bar))
        self.a_scale.valueChanged.connect(lambda _: self._number_changed(self.a_bar))
        self.x_overwrite.toggled.connect(self._extract_changed)
        self.a_overwrite.toggled.connect(self._apply_changed)
        self._refresh_capabilities()
        self._restore_form()
        self.recheck()

    @staticmethod
    def _scrolled(widget: QWidget) -> QScrollArea:
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(widget)
        return scroll

    @staticmethod
    def _with_bar(scroll: QScrollArea, bar: ActionBar) -> QWidget:
        """The tab: its form scrolling above, its action bar below (never scrolled away)."""
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll, 1)
        layout.addWidget(bar)
        return tab

    # --- extract ---------------------------------------------------------------------------------------------

    def _build_extract(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.addWidget(WrappingLabel("Turn a fine-tuned model into a small LoRA adapter: the difference from its base "
                                "model, compressed."))
        models = QGroupBox("Models")
        form = QFormLayout(models)
        self.x_base = ModelPicker("The base model the fine-tune started from")
        self.x_model = ModelPicker("The fine-tuned model")
        for picker in (self.x_base, self.x_model):
            picker.changed.connect(self._extract_changed)
        form.addRow("Base model", self.x_base)
        form.addRow("Fine-tuned model", self.x_model)
        self.x_check = WrappingLabel()
        form.addRow("", self.x_check)
        column.addWidget(models)

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
        column.addWidget(rank)
        self._rank_mode_changed()

        modules = QGroupBox("Modules")
        form = QFormLayout(modules)
        self.embeddings = QComboBox(accessibleName="Embeddings")
        self.embeddings.addItem("Save them whole (safest)", "save")
        self.embeddings.addItem("Decompose them too (smaller)", "lora")
        self.embeddings.addItem("Leave them out (reported)", "skip")
        form.addRow("Embeddings and output head", self.embeddings)
        self.modules_toggle = QToolButton(text="Advanced: choose which modules", checkable=True,
                                          arrowType=Qt.ArrowType.RightArrow)
        self.modules_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.modules_toggle.toggled.connect(self._show_module_choice)
        form.addRow(self.modules_toggle)
        self.modules_advanced = QWidget(visible=False)
        advanced = QFormLayout(self.modules_advanced)
        advanced.setContentsMargins(0, 0, 0, 0)
        self.module_list = QListWidget(accessibleName="Module kinds")
        self.module_list.setMaximumHeight(150)
        self.module_list.itemChanged.connect(lambda _: self._module_kinds_chosen())
        self.module_status = WrappingLabel(MODULES_HINT)
        self.include = QLineEdit(placeholderText="all modules (a regular expression, e.g. self_attn)")
        self.exclude = QLineEdit(placeholderText="none (a regular expression, e.g. lm_head)")
        advanced.addRow("Only these modules", self.module_list)
        advanced.addRow("", self.module_status)
        advanced.addRow("Only modules matching", self.include)
        advanced.addRow("Leave out modules matching", self.exclude)
        form.addRow(self.modules_advanced)
        self._module_lister = LatestTask(300, self)
        column.addWidget(modules)

        output = QGroupBox("Output")
        form = QFormLayout(output)
        self.x_device, self.x_dtype = OptionCombo(), OptionCombo()
        self.x_device.setAccessibleName("Device")
        self.x_dtype.setAccessibleName("Adapter dtype")
        self.x_device.choice_changed.connect(lambda _: self._refresh_capabilities())
        self.x_device.choice_changed.connect(lambda _: self._extract_changed())
        form.addRow("Device", self.x_device)
        form.addRow("Adapter dtype", self.x_dtype)
        form.addRow("", WrappingLabel("The decomposition is always computed in float32."))
        self.x_out, x_out_row = self._folder_row("lora-adapter")
        self.x_out.textChanged.connect(self._extract_changed)
        form.addRow("Adapter folder", x_out_row)
        self.x_overwrite = QCheckBox("Replace the folder if it already exists")
        form.addRow("", self.x_overwrite)
        column.addWidget(output)

        self.x_estimate = WrappingLabel(X_ESTIMATE_HINT)
        self.x_report = WrappingLabel()
        self.x_report.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.x_estimate)
        column.addWidget(self.x_report)
        self.x_report_chart = ModuleEnergyChart()
        column.addWidget(self.x_report_chart)
        column.addStretch()
        return page

    def _folder_row(self, name: str) -> tuple[QLineEdit, QWidget]:
        edit = QLineEdit(str(default_output_folder() / name))
        browse = QPushButton("Browse…")
        browse.clicked.connect(lambda: self._browse(edit, name))
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(edit, 1)
        layout.addWidget(browse)
        return edit, row

    def _browse(self, edit: QLineEdit, name: str) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Where to write it", str(default_output_folder()))
        if folder:
            edit.setText(str(Path(folder) / name))

    def _rank_mode_changed(self) -> None:
        _, low, high, step, decimals, default, tip = RANK_MODES[self.rank_mode.currentData()]
        self.rank_value.setDecimals(decimals)
        self.rank_value.setSingleStep(step)
        self.rank_value.setValue(default)
        mark_range(self.rank_value, self.rank_value.value(), low, high, tip)

    def set_extract_models(self, model: str, base: str | None = None) -> None:
        """Pre-fill from the library ("Extract LoRA from this"): the fine-tune, and its base when known."""
        self.tabs.setCurrentIndex(0)
        self.x_model.set_text(model)
        if base:
            self.x_base.set_text(base)

    def _show_module_choice(self, shown: bool) -> None:
        self.modules_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.modules_advanced.setVisible(shown)

    async def _list_modules(self, base: str) -> None:
        from guiapp.jobs.library import module_kinds

        try:
            kinds = await run_blocking(module_kinds, base)
        except Exception as error:  # the pair check says what is wrong with the base
            self.module_list.clear()
            self.module_status.setText(f"The base model's modules could not be listed: {error_text(error)}")
            return
        self.module_list.blockSignals(True)
        self.module_list.clear()
        for kind, count in kinds:
            item = QListWidgetItem(f"{kind}  ({plural(count, 'matrix', 'matrices')})")
            item.setData(Qt.ItemDataRole.UserRole, kind)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Unchecked)
            self.module_list.addItem(item)
        self.module_list.blockSignals(False)
        self.module_status.setText("Tick the kinds of modules to extract; with none ticked, every changed module "
                                   "is extracted.")

    def _module_kinds_chosen(self) -> None:
        from guiapp.jobs.library import modules_pattern

        items = (self.module_list.item(row) for row in range(self.module_list.count()))
        self.include.setText(modules_pattern(item.data(Qt.ItemDataRole.UserRole) for item in items
                                             if item.checkState() == Qt.CheckState.Checked))

    def _describe_extract(self, *_: Any, time: str = "") -> None:
        """The extraction's summary line: the rank, the fine-tune, the adapter folder's name, the time."""
        mode = self.rank_mode.currentData()
        rank = (f"Rank {int(self.rank_value.value())}" if mode == "fixed" else
                f"{RANK_MODES[mode][0]} {self.rank_value.value():g}")
        parts = [rank, f"from {Path(self.x_model.text()).name or 'the fine-tune'}"]
        if self.x_out.text().strip():
            parts.append(f"into {Path(self.x_out.text().strip()).name}")
        self.x_bar.set_summary(" · ".join(parts + ([time] if time else [])))

    def _use_rank(self, rank: int) -> None:
        """A rank clicked on the preview: a fixed rank of that value."""
        self.rank_mode.setCurrentIndex(self.rank_mode.findData("fixed"))
        self.rank_value.setValue(rank)

    def _extract_changed(self, *_: Any) -> None:
        base, model = self.x_base.text(), self.x_model.text()
        self._describe_extract()
        if self._report_pair is not None and self._report_pair != (base, model):
            self._report_pair = self._extract_key = None  # the report was about other models
            self.x_report.clear()
            self.x_report_chart.show_summary(None)
        self.rank_preview.set_pair(base, model)
        if base:
            self._module_lister.request(lambda: self._list_modules(base))
        else:  # the kinds listed were another base's
            self._module_lister.cancel()
            self.module_list.clear()
            self.module_status.setText(MODULES_HINT)
        if not (base and model):
            self._checker.cancel()  # a check still running for the models no longer chosen is dropped
            self.x_check.clear()
            self.x_estimate.setText(X_ESTIMATE_HINT)
            self.x_bar.set_waiting("Choose the base model and the fine-tuned model first.")
            return
        self.x_check.setText("Checking the models…")
        set_status_style(self.x_check, "muted")
        self._checks[self.x_bar] = None
        self._show_checking(self.x_bar)
        device, out, probe = self.x_device.value() or "cpu", self.x_out.text().strip(), self.state.probe
        replace = self.x_overwrite.isChecked()
        options = {"rule": self._rank_rule(), "solver": self.solver.currentData(),
                   "embeddings": self.embeddings.currentData()}
        self._checker.request(lambda: self._check_pair(base, model, device, out, probe, replace, options))

    def _rank_rule(self) -> Any:
        """The rank rule the form describes (the estimate depends on it)."""
        from guiapp.engine.lowrank import RankRule  # loaded by the time a pair is checked

        mode = self.rank_mode.currentData()
        return RankRule(mode, _rank_value(mode, self.rank_value.value()), self.max_rank.value() or None)

    async def _check_pair(self, base: str, model: str, device: str, out: str, probe: Any, replace: bool,
                          options: dict[str, Any]) -> None:
        self._show_extract_check(await run_blocking(partial(check_pair, **options), base, model, device, out, probe,
                                                    replace))

    def _show_extract_check(self, check: PairCheck) -> None:
        from guiapp.system.units import format_bytes

        problems = _model_problems(check)
        if problems:
            self.x_check.setText(window_text("\n".join(problem.text for problem in problems)))
            set_status_style(self.x_check, "problem")
            self.x_estimate.setText("The estimate appears once both models can be read.")
            self.x_bar.set_blocked(problems[0].text)
            return
        self._show_output_check(self.x_bar, check)
        self._describe_extract(time=str(check.time) if check.time is not None else "")
        self.x_check.setText(f"✓ These models pair up: {plural(check.matrices, 'weight matrix', 'weight matrices')} "
                             "to compare.")
        set_status_style(self.x_check, "good")
        lines = [f"Reads {format_bytes(check.read_bytes)}."]
        if check.fit is not None:
            lines.append(f"{sentence(check.fit.level.value)}: about {format_bytes(check.fit.peak_ram)} of RAM "
                         f"at most; {format_bytes(check.fit.disk_free)} free for the adapter.")
        if check.time is not None:
            lines.append(f"Time: {check.time}.")
        self.x_estimate.setText("\n".join(lines))

    def run_extract(self) -> str | None:
        from guiapp.jobs.specs import extract_job

        if not (self.x_base.text() and self.x_model.text() and self.x_out.text().strip()):
            self.x_check.setText("Choose the base model, the fine-tuned model and the adapter folder first.")
            set_status_style(self.x_check, "problem")
            return None
        if self._number_out_of_range(self.x_bar) is not None:
            return None  # the bar says which and offers the fix
        job = extract_job(
            self.x_base.text(), self.x_model.text(), expanded(self.x_out.text().strip()),
            rank_mode=self.rank_mode.currentData(), rank_value=_rank_value(self.rank_mode.currentData(),
                                                                           self.rank_value.value()),
            max_rank=self.max_rank.value() or None, solver=self.solver.currentData(),
            include=self.include.text().strip() or None, exclude=self.exclude.text().strip() or None,
            embeddings=self.embeddings.currentData(), dtype=self.x_dtype.value(),
            device=self.x_device.value() or "cpu", overwrite=self.x_overwrite.isChecked(),
        )
        record = self.state.jobs.submit(job)
        self._extract_key = record.key
        self._report_pair = (self.x_base.text(), self.x_model.text())
        self.x_report.setText("Running… (progress on the Jobs page)")
        self.x_report_chart.show_summary(None)
        set_status_style(self.x_report, "muted")
        self.job_submitted.emit(record.key)
        return record.key

    def _follow_retry(self, key: str) -> None:
        """A retry of the extraction the report follows is that extraction now: its end is what the report says."""
        record = self.state.jobs.record(key)
        if record is not None and self._extract_key is not None and record.retry_of == self._extract_key:
            self._extract_key = key
            self.x_report.setText("Running again… (progress on the Jobs page)")
            set_status_style(self.x_report, "muted")

    def _job_changed(self, key: str) -> None:
        if key != self._extract_key:
            return
        record = self.state.jobs.record(key)
        if record.status == JobStatus.DONE:
            report = extraction_report(record.summary)
            self.x_report.setText(report)
            self.x_report_chart.show_summary(record.summary)
            set_status_style(self.x_report, "warning" if "Warning" in report else None)
            QTimer.singleShot(0, lambda: self.extract_scroll.ensureWidgetVisible(self.x_report))  # once laid out
        elif record.status in (JobStatus.FAILED, JobStatus.CANCELLED):
            self.x_report.setText(f"The extraction {record.status}: the Jobs page says why.")
            set_status_style(self.x_report, "problem")

    # --- apply -----------------------------------------------------------------------------------------------

    def _build_apply(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.addWidget(WrappingLabel("Bake a LoRA adapter into its base model, giving a full model folder."))
        models = QGroupBox("Models")
        form = QFormLayout(models)
        self.a_base = ModelPicker("The base model the adapter was trained on")
        self.a_adapter = ModelPicker("The adapter: org/name or a folder with adapter_config.json",
                                     kinds=("adapter",))
        self.a_adapter.changed.connect(self._fill_base_of_adapter)
        for picker in (self.a_base, self.a_adapter):
            picker.changed.connect(self._apply_changed)
        form.addRow("Base model", self.a_base)
        form.addRow("Adapter", self.a_adapter)
        self.a_scale = QDoubleSpinBox(accessibleName="Scale", minimum=-UNBOUNDED, maximum=UNBOUNDED, singleStep=0.1,
                                      value=1.0, toolTip=SCALE_TIP)
        form.addRow("Strength", self.a_scale)
        self.a_check = WrappingLabel()
        form.addRow("", self.a_check)
        column.addWidget(models)
        output = QGroupBox("Output")
        form = QFormLayout(output)
        self.a_device, self.a_dtype = OptionCombo(), OptionCombo()
        self.a_device.setAccessibleName("Device")
        self.a_dtype.setAccessibleName("Model dtype")
        self.a_device.choice_changed.connect(lambda _: self._refresh_capabilities())
        form.addRow("Device", self.a_device)
        form.addRow("Model dtype", self.a_dtype)
        self.a_out, a_out_row = self._folder_row("model-with-lora")
        self.a_out.textChanged.connect(self._apply_changed)
        form.addRow("Model folder", a_out_row)
        self.a_overwrite = QCheckBox("Replace the folder if it already exists")
        form.addRow("", self.a_overwrite)
        column.addWidget(output)
        self.a_estimate = WrappingLabel(A_ESTIMATE_HINT)
        column.addWidget(self.a_estimate)
        column.addStretch()
        return page

    def _fill_base_of_adapter(self, adapter: str) -> None:
        """Fill the base model in from the adapter's own config, unless the user chose another base."""
        from guiapp.jobs.library import adapter_base

        adapter = adapter.strip()
        entry = self.state.library.find(adapter) if adapter else None
        base = entry.base_model if entry else adapter_base(adapter) if adapter and Path(adapter).is_dir() else None
        if base and self.a_base.text() in ("", self._filled_base):
            self._filled_base = base
            self.a_base.set_text(base)

    def _describe_apply(self, *_: Any, time: str = "") -> None:
        """The application's summary line: the adapter, the base, the strength, the output folder's name, the
        time."""
        adapter, base = Path(self.a_adapter.text()).name or "The adapter", Path(self.a_base.text()).name
        parts = [f"{adapter} onto {base or 'its base model'}", f"strength {self.a_scale.value():g}"]
        if self.a_out.text().strip():
            parts.append(f"into {Path(self.a_out.text().strip()).name}")
        self.a_bar.set_summary(" · ".join(parts + ([time] if time else [])))

    def _apply_changed(self, *_: Any) -> None:
        base, adapter = self.a_base.text(), self.a_adapter.text()
        self._describe_apply()
        if not (base and adapter):
            self._apply_checker.cancel()
            self.a_check.clear()
            self.a_estimate.setText(A_ESTIMATE_HINT)
            self.a_bar.set_waiting("Choose the base model and the adapter first.")
            return
        self.a_check.setText("Checking the adapter against the base model…")
        set_status_style(self.a_check, "muted")
        self._checks[self.a_bar] = None
        self._show_checking(self.a_bar)
        device, out, replace = self.a_device.value() or "cpu", self.a_out.text().strip(), self.a_overwrite.isChecked()
        probe = self.state.probe
        self._apply_checker.request(lambda: self._check_adapter(base, adapter, device, out, replace, probe))

    async def _check_adapter(self, base: str, adapter: str, device: str, out: str, replace: bool, probe: Any) -> None:
        self._show_apply_check(await run_blocking(check_adapter, base, adapter, device, out, replace, probe))

    def _show_apply_check(self, check: PairCheck) -> None:
        from guiapp.system.units import format_bytes

        problems = _model_problems(check)
        if problems:
            self.a_check.setText(window_text("\n".join(problem.text for problem in problems)))
            set_status_style(self.a_check, "problem")
            self.a_estimate.setText("The estimate appears once the adapter fits the base model.")
            self.a_bar.set_blocked(problems[0].text)
            return
        self._show_output_check(self.a_bar, check)
        self._describe_apply(time=str(check.time) if check.time is not None else "")
        self.a_check.setText(f"✓ The adapter fits this base model ({plural(check.matrices, 'module')} changed).")
        set_status_style(self.a_check, "good")
        lines = [f"Reads and writes about {format_bytes(check.read_bytes)}."]
        if check.fit is not None:
            lines.append(f"{sentence(check.fit.level.value)}: {check.fit.reason}.")
        if check.time is not None:
            lines.append(f"Time: {check.time}.")
        self.a_estimate.setText("\n".join(lines))

    def _show_output_check(self, bar: ActionBar, check: PairCheck) -> None:
        """Ready, or blocked on a number out of its range (with the nearest allowed value as the one-click fix) or
        on the output folder (taken, or inside an input: with a free folder as the fix)."""
        self._checks[bar] = check
        if self._blocked_by_a_number(bar):
            return
        problem = next((p for p in check.errors if p.key == OUTPUT_KEY), None)
        edit = self.x_out if bar is self.x_bar else self.a_out
        chosen = edit.text().strip()
        free = free_output(problem.error, chosen) if problem else None
        self._fixes[bar] = (lambda: edit.setText(free[0])) if free else None  # checks again
        if problem is None:
            bar.set_ready()
        else:  # the folder's whole path is in its field: the name is enough
            bar.set_blocked(recipe_words(problem.text, None, [chosen, str(expanded(chosen))] if chosen else []),
                            fix=free[1] if free else None)

    def _show_checking(self, bar: ActionBar) -> None:
        """While the models are checked: a number out of its range blocks Run at once (it needs no check);
        otherwise the bar says it is checking."""
        if not self._blocked_by_a_number(bar):
            bar.set_checking()

    def _blocked_by_a_number(self, bar: ActionBar) -> bool:
        """Block `bar`'s Run on a number of its form out of range, with the nearest allowed value as the one-click
        fix; False when every number is within its range."""
        out_of_range = self._number_out_of_range(bar)
        if out_of_range is None:
            return False
        text, box, nearest = out_of_range
        self._fixes[bar] = lambda: box.setValue(nearest)
        bar.set_blocked(text, fix=f"Use {nearest:g}")
        return True

    def _number_out_of_range(self, bar: ActionBar) -> tuple[str, QDoubleSpinBox, float] | None:
        """The number of `bar`'s form outside its range (the rank value, the strength): what to say, its box and
        the nearest allowed value; None when it is within."""
        if bar is self.x_bar:
            label, low, high = RANK_MODES[self.rank_mode.currentData()][:3]
            box = self.rank_value
        else:
            (low, high), label, box = SCALE_RANGE, "Strength", self.a_scale
        number = box.value()
        if low <= number <= high:
            return None
        return f"{label} is {number:g}; it must be between {low:g} and {high:g}.", box, nearest_allowed(number, low, high)

    def _number_changed(self, bar: ActionBar) -> None:
        """Mark the number's box when out of range and, once the models are checked, show whether it blocks Run."""
        if bar is self.x_bar:
            _, low, high, *_, tip = RANK_MODES[self.rank_mode.currentData()]
            mark_range(self.rank_value, self.rank_value.value(), low, high, tip)
        else:
            mark_range(self.a_scale, self.a_scale.value(), *SCALE_RANGE, SCALE_TIP)
        if self._checks[bar] is not None:
            self._show_output_check(bar, self._checks[bar])

    def run_apply(self) -> str | None:
        from guiapp.jobs.specs import apply_job

        if not (self.a_base.text() and self.a_adapter.text() and self.a_out.text().strip()):
            self.a_check.setText("Choose the base model, the adapter and the output folder first.")
            set_status_style(self.a_check, "problem")
            return None
        if self._number_out_of_range(self.a_bar) is not None:
            return None  # the bar says which and offers the fix
        job = apply_job(self.a_base.text(), self.a_adapter.text(), expanded(self.a_out.text().strip()),
                        scale=self.a_scale.value(), dtype=self.a_dtype.value(), device=self.a_device.value() or "cpu",
                        overwrite=self.a_overwrite.isChecked())
        record = self.state.jobs.submit(job)
        self.job_submitted.emit(record.key)
        return record.key

    # --- shared ----------------------------------------------------------------------------------------------

    def save_form(self) -> None:
        """Keep both forms for the next start (never the Replace choices, which are made each time)."""
        from guiapp.jobs.form_memory import remember_form

        remember_form("lora", {
            "x_base": self.x_base.text(), "x_model": self.x_model.text(), "rank_mode": self.rank_mode.currentData(),
            "rank_value": self.rank_value.value(), "max_rank": self.max_rank.value(),
            "solver": self.solver.currentData(), "include": self.include.text(), "exclude": self.exclude.text(),
            "embeddings": self.embeddings.currentData(), "x_out": self.x_out.text(),
            "a_base": self.a_base.text(), "a_adapter": self.a_adapter.text(), "a_scale": self.a_scale.value(),
            "a_out": self.a_out.text(),
        })

    def _restore_form(self) -> None:
        from guiapp.jobs.form_memory import remembered_form

        form = remembered_form("lora")
        for combo, key in ((self.rank_mode, "rank_mode"), (self.solver, "solver"), (self.embeddings, "embeddings")):
            if (index := combo.findData(form.get(key))) >= 0:
                combo.setCurrentIndex(index)  # the rank mode first: choosing it resets the rank value
        for spin, key in ((self.rank_value, "rank_value"), (self.max_rank, "max_rank"), (self.a_scale, "a_scale")):
            if isinstance(form.get(key), int | float):
                spin.setValue(form[key])
        texts = {"x_base": self.x_base.set_text, "x_model": self.x_model.set_text, "include": self.include.setText,
                 "exclude": self.exclude.setText, "x_out": self.x_out.setText, "a_base": self.a_base.set_text,
                 "a_adapter": self.a_adapter.set_text, "a_out": self.a_out.setText}
        for key, set_text in texts.items():
            if isinstance(form.get(key), str) and form[key]:
                set_text(form[key])
        self.modules_toggle.setChecked(bool(self.include.text() or self.exclude.text()))  # never hidden when set

    def recheck(self) -> None:
        """Check both forms again (what they depend on outside the page changed: a sign-in, offline mode, a job's
        end, the library)."""
        self._extract_changed()
        self._apply_changed()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        """A folder may have appeared or gone while another page (or program) was in front: check again."""
        super().showEvent(event)
        self.recheck()

    def _refresh_capabilities(self) -> None:
        probe = self.state.probe
        for job, device, dtype, dtypes, default in (
            ("extract", self.x_device, self.x_dtype, ADAPTER_DTYPES, "Same as the fine-tune"),
            ("apply", self.a_device, self.a_dtype, MODEL_DTYPES, "Same as the base model"),
        ):
            device.set_choices(device_choices(probe, job))
            dtype.set_choices(dtype_choices(probe, job, device.value() or "cpu", dtypes, default))


def _rank_value(mode: str, value: float) -> float:
    return int(value) if mode == "fixed" else value


def _model_problems(check: PairCheck) -> list[Problem]:
    """The check's errors about the models (said next to them); the output folder's are the bar's."""
    return [problem for problem in check.errors if problem.key != OUTPUT_KEY]
