"""The Merge page's "Before you run" box (the estimate: reads, writes, memory, time, and the fit verdict) and its
action bar (Run merge, the one-line summary, and why the merge cannot run yet).

The box scrolls with the form; the page puts `action_bar` below the scroll area, always in sight.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QGroupBox, QVBoxLayout

from guiapp.system.units import format_bytes, plural
from guiapp.ui.text import sentence
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.action_bar import ActionBar
from guiapp.ui.widgets.wrapping_label import WrappingLabel


class RunBox(QGroupBox):
    def __init__(self) -> None:
        super().__init__("Before you run")
        layout = QVBoxLayout(self)
        self.estimate = WrappingLabel("Fill in the models to see the estimate.")
        self.fit_label = WrappingLabel()
        layout.addWidget(self.estimate)
        layout.addWidget(self.fit_label)
        self.action_bar = ActionBar("Run merge")
        self.run_button, self.run_message = self.action_bar.button, self.action_bar.status
        self._job = ""  # "TIES · 2 models · into tiny-chat+tiny-code-ties"
        self._time = ""

    def describe_job(self, method: str, models: int, output: str) -> None:
        """What the merge will do, for the summary line: the method's name, how many models, the output's name."""
        parts = [method or "No method", plural(models, "model")]
        if output:
            parts.append(f"into {Path(output).name or output}")
        self._job = " · ".join(parts)
        self._show_summary()

    def _show_summary(self) -> None:
        self.action_bar.set_summary(self._job + (f" · {self._time}" if self._time else ""))

    def show_waiting(self, estimate: str, message: str = "") -> None:
        """No check to show: `estimate` says what is missing; `message` says why Run is not available yet."""
        self.estimate.setText(estimate)
        self.fit_label.clear()
        self._time = ""
        self._show_summary()
        self.action_bar.set_waiting(message or "Choose the models to merge first.")

    def show_checking(self) -> None:
        self.action_bar.set_checking()

    def show_check(self, result: Any, can_show: bool = False, fix: str | None = None, first_error: str = "") -> None:
        """Show a `guiapp.jobs.validation.MergeCheck`'s estimate and fit, and whether the merge can run; for its
        first error (`first_error`: its text as the window words it, else its own), `can_show` offers "Show me"
        and `fix` (in words) a one-click fix."""
        self._time = str(result.time) if result.time and not result.errors else ""
        self._show_summary()
        sizes = f"Reads {format_bytes(result.input_bytes)}; writes {format_bytes(result.output_bytes)}."
        if result.errors:
            self.estimate.setText(sizes if result.compatible else "The estimate appears once the recipe is valid.")
            self.fit_label.clear()
            self.action_bar.set_blocked(first_error or result.errors[0].text, can_show, fix)
            return
        lines = [sizes]
        if result.fit is not None:
            lines.append(f"Working memory about {format_bytes(result.fit.peak_ram)} of RAM"
                         + (f" and {format_bytes(result.fit.peak_vram)} of VRAM" if result.fit.peak_vram else "")
                         + f"; {format_bytes(result.fit.disk_free)} free on the output drive.")
        lines.append(f"Time: {result.time}." if result.time else
                     "Time: known once this machine's speed has been measured (Hardware page).")
        self.estimate.setText("\n".join(lines))
        if result.fit is not None:
            level = result.fit.level.name
            self.fit_label.setText(f"{sentence(result.fit.level.value)}: {result.fit.reason}.")
            self.fit_label.setToolTip(result.fit.summary())
            set_status_style(self.fit_label, {"WILL_NOT_FIT": "problem", "TIGHT": "warning"}.get(level, "good"))
        self.action_bar.set_ready()
