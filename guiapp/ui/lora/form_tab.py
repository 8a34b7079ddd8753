"""What the LoRA page's tabs share: the form scrolling above its action bar, a folder row, and Run blocked (with a
one-click fix) by a number out of its range or by an output folder that is taken."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from guiapp.facts.wording import for_window
from guiapp.jobs.plain_words import recipe_words
from guiapp.jobs.runner import JobStatus
from guiapp.jobs.validation import PairCheck, Problem, free_output
from guiapp.system.paths import expanded
from guiapp.ui.merge.output_box import default_output_folder
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.action_bar import ActionBar
from guiapp.ui.widgets.options import OptionCombo, device_choices, dtype_choices
from guiapp.ui.widgets.param_form import nearest_allowed
from guiapp.ui.widgets.wrapping_label import WrappingLabel

OUTPUT_KEY = ("output",)  # the key of a check's problems with the output folder


class FormTab(QWidget):
    """A tab of the LoRA page: its form (`scroll.setWidget`) scrolls above `bar`, whose Run button starts the tab's
    job.

    Subclasses build their form, set `out` (the output folder's field), `device` and `dtype` (the probe's choices
    for their JOB: DTYPES, DEFAULT_DTYPE naming "keep the model's own"), and say which number of theirs may be out of
    range (`number_out_of_range`)."""

    JOB = ""
    DTYPES: tuple[str, ...] = ()
    DEFAULT_DTYPE = ""

    def __init__(self, state, action: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.bar = ActionBar(action)
        self.run_button = self.bar.button
        self.scroll = QScrollArea(widgetResizable=True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scroll, 1)
        layout.addWidget(self.bar)
        self.out: QLineEdit
        self.device: OptionCombo
        self.dtype: OptionCombo
        self.check: QLabel  # what the check of the inputs found, next to them
        self._fix: Callable[[], None] | None = None  # what the bar's fix button does
        self._last_check: PairCheck | None = None  # None while there is none, or it found a problem with the models
        self.bar.fix_button.clicked.connect(lambda _=False: self._fix and self._fix())

    def folder_row(self, name: str) -> tuple[QLineEdit, QWidget]:
        """An output folder's field (`name` in the default output folder) with its Browse… button."""
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

    def refresh_capabilities(self) -> None:
        """Fill the device and dtype dropdowns from the capability probe (its answer may have just arrived); a tab
        without them (no JOB: it runs nothing on a device) has none to fill."""
        if not self.JOB:
            return
        probe = self.state.probe
        self.device.set_choices(device_choices(probe, self.JOB))
        self.dtype.set_choices(dtype_choices(probe, self.JOB, self.device.value() or "cpu", self.DTYPES,
                                             self.DEFAULT_DTYPE))

    def number_out_of_range(self) -> tuple[str, QDoubleSpinBox, float] | None:
        """The number of this form outside its range: what to say, its box and the nearest allowed value; None when
        every number is within (a form says which of its numbers have ranges)."""
        return None

    def show_input_problems(self, check: PairCheck) -> bool:
        """Show the check's problems with the inputs next to them and block Run on the first; False when there are
        none (the caller then shows what it found)."""
        problems = _model_problems(check)
        if not problems:
            return False
        self.check.setText("\n".join(for_window(problem.text) for problem in problems))
        set_status_style(self.check, "problem")
        self.bar.set_blocked(problems[0].text)
        return True

    def forget_check(self) -> None:
        """The models are being checked again: the last check no longer says whether Run may start."""
        self._last_check = None

    def show_output_check(self, check: PairCheck) -> None:
        """Ready, or blocked on a number out of its range (with the nearest allowed value as the one-click fix) or
        on the output folder (taken, or inside an input: with a free folder as the fix)."""
        self._last_check = check
        if self._blocked_by_a_number():
            return
        problem = next((p for p in check.errors if p.key == OUTPUT_KEY), None)
        chosen = self.out.text().strip()
        free = free_output(problem.error, chosen) if problem else None
        self._fix = (lambda: self.out.setText(free[0])) if free else None  # checks again
        if problem is None:
            self.bar.set_ready()
        else:  # the folder's whole path is in its field: the name is enough
            self.bar.set_blocked(recipe_words(for_window(problem.text), None, [chosen, str(expanded(chosen))] if chosen else []),
                                 fix=free[1] if free else None)

    def show_checking(self) -> None:
        """While the models are checked: a number out of its range blocks Run at once (it needs no check);
        otherwise the bar says it is checking."""
        if not self._blocked_by_a_number():
            self.bar.set_checking()

    def _blocked_by_a_number(self) -> bool:
        """Block Run on a number out of range, with the nearest allowed value as the one-click fix; False when every
        number is within its range."""
        out_of_range = self.number_out_of_range()
        if out_of_range is None:
            return False
        text, box, nearest = out_of_range
        self._fix = lambda: box.setValue(nearest)
        self.bar.set_blocked(text, fix=f"Use {nearest:g}")
        return True

    def number_changed(self) -> None:
        """Once the models are checked, show whether the number changed blocks Run."""
        if self._last_check is not None:
            self.show_output_check(self._last_check)


def out_of_range(label: str, box: QDoubleSpinBox, low: float, high: float) -> tuple[str, QDoubleSpinBox, float] | None:
    """`number_out_of_range`'s answer for `box`, whose value must lie in [low, high]."""
    number = box.value()
    if low <= number <= high:
        return None
    return f"{label} is {number:g}; it must be between {low:g} and {high:g}.", box, nearest_allowed(number, low, high)


def _model_problems(check: PairCheck) -> list[Problem]:
    """The check's errors about the models (said next to them); the output folder's are the bar's."""
    return [problem for problem in check.errors if problem.key != OUTPUT_KEY]


class ReportingTab(FormTab):
    """A tab whose job's result is reported under its form (`report`), until the tab starts another."""

    job_submitted = Signal(str)

    def __init__(self, state, action: str, what: str, words: Callable[[dict], str],
                 parent: QWidget | None = None) -> None:
        super().__init__(state, action, parent)
        self._what = what  # the job in words, for "The resize failed: …"
        self._words = words  # a finished job's summary in words
        self._job_key: str | None = None
        self.report = WrappingLabel()
        self.report.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        state.jobs.record_changed.connect(self._job_changed)

    def submit(self, job) -> str:
        """Run `job` (its progress on the Jobs page) and report on it here; its key."""
        record = self.state.jobs.submit(job)
        self._job_key = record.key
        self.report.setText("Running… (progress on the Jobs page)")
        set_status_style(self.report, "muted")
        self.job_submitted.emit(record.key)
        return record.key

    def show_result(self, summary: dict) -> None:
        """Show a finished job's summary in `report` (a tab with a chart shows it there too)."""
        self.report.setText(self._words(summary))
        set_status_style(self.report, None)

    def _job_changed(self, key: str) -> None:
        if key != self._job_key:
            return
        record = self.state.jobs.record(key)
        if record.status == JobStatus.DONE:
            self.show_result(record.summary)
            QTimer.singleShot(0, lambda: self.scroll.ensureWidgetVisible(self.report))  # once laid out
        elif record.status in (JobStatus.FAILED, JobStatus.CANCELLED):
            self.report.setText(f"The {self._what} {record.status}: the Jobs page says why.")
            set_status_style(self.report, "problem")
