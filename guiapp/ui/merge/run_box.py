"""The Merge page's "Before you run" box: the estimate (reads, writes, memory, time), the fit verdict, and Run."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout

from guiapp.ui.text import sentence
from guiapp.ui.theme import set_status_style


class RunBox(QGroupBox):
    def __init__(self) -> None:
        super().__init__("Before you run")
        layout = QVBoxLayout(self)
        self.estimate = QLabel("Fill in the models to see the estimate.", wordWrap=True)
        self.fit_label = QLabel(wordWrap=True)
        layout.addWidget(self.estimate)
        layout.addWidget(self.fit_label)
        run_row = QHBoxLayout()
        self.run_button = QPushButton("Run merge")
        self.run_button.setDefault(True)
        self.run_message = QLabel(wordWrap=True)
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.run_message, 1)
        layout.addLayout(run_row)

    def show_waiting(self, estimate: str, message: str = "") -> None:
        """No check to show: `estimate` says what is missing; `message` says what is happening ("Checking…")."""
        self.estimate.setText(estimate)
        self.fit_label.clear()
        self.run_message.setText(message)
        set_status_style(self.run_message, "muted" if message else None)

    def show_checking(self) -> None:
        self.run_message.setText("Checking…")
        set_status_style(self.run_message, "muted")

    def show_check(self, result: Any) -> None:
        """Show a `guiapp.jobs.validation.MergeCheck`'s estimate and fit, and whether the merge can run."""
        from guiapp.system.units import format_bytes  # noqa: PLC0415

        sizes = f"Reads {format_bytes(result.input_bytes)}; writes {format_bytes(result.output_bytes)}."
        if result.errors:
            self.estimate.setText(sizes if result.compatible else "The estimate appears once the recipe is valid.")
            self.fit_label.clear()
            self.run_message.setText("Fix the problem shown above, then run.")
            set_status_style(self.run_message, "problem")
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
        self.run_message.setText("Ready.")
        set_status_style(self.run_message, "good")
