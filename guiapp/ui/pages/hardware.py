"""The Hardware page: the answer first (per device, the dtype to store models in and the one computed in), RAM,
VRAM and disk, what each job can store, and, behind "Details for engineers", the probe's matrix (each operation in
each dtype, with a tooltip in plain words), with Re-probe."""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.facts.dtypes import PROBED
from guiapp.ui.background import call_in_background
from guiapp.ui.theme import set_heading, set_status_style, status_colour
from guiapp.ui.widgets.wrapping_label import WrappingLabel

JOB_WORDS = {"merge": "Merge", "extract": "Extract LoRA", "apply": "Apply LoRA", "try": "Try a model"}


class HardwarePage(QWidget):
    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.verdict = WrappingLabel("Checking what this machine can do… (the first time takes a few seconds)")
        set_heading(self.verdict, 1.15)
        self.summary = WrappingLabel()
        self.memory = WrappingLabel()
        self.device_combo = QComboBox(accessibleName="Device")
        self.device_combo.currentIndexChanged.connect(lambda _: self._show_device())
        self.reprobe_button = QPushButton("Re-probe")
        self.reprobe_button.setToolTip("Test every device and dtype again (after a driver or PyTorch update)")
        self.reprobe_button.clicked.connect(self.reprobe)
        top = QHBoxLayout()
        top.addWidget(QLabel("Device"))
        top.addWidget(self.device_combo, 1)
        top.addWidget(self.reprobe_button)
        self.jobs_table = _table("What each job can store on this device")
        self.matrix = _table("Operations × dtypes")
        self.details_button = QToolButton(text="Details for engineers", checkable=True,
                                          arrowType=Qt.ArrowType.RightArrow)
        self.details_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.details_button.toggled.connect(self._show_details)
        self.details = QWidget(visible=False)
        details = QVBoxLayout(self.details)
        details.setContentsMargins(0, 0, 0, 0)
        details.addWidget(QLabel("<b>Operations tested in each dtype</b> on this device (hover a cell for what it "
                                 "means)"))
        details.addWidget(self.matrix, 1)
        details.addWidget(self.summary)
        layout = QVBoxLayout(self)
        layout.addWidget(self.verdict)
        layout.addWidget(self.memory)
        layout.addLayout(top)
        layout.addWidget(QLabel("<b>What each job can store on this device</b> (every job computes in float32)"))
        layout.addWidget(self.jobs_table)
        layout.addWidget(self.details_button)
        layout.addWidget(self.details, 1)
        layout.addStretch()
        state.probe_ready.connect(self.show_probe)
        state.probe_failed.connect(self._failed)
        if state.probe is not None:
            self.show_probe(state.probe)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        self._show_memory()  # free memory and disk change: read them whenever the page is opened

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        # The cells' colours are chosen for the palette: choose again when the scheme changes.
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self.state.probe is not None:
            self._show_device()

    def _show_details(self, shown: bool) -> None:
        self.details_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.details.setVisible(shown)

    def reprobe(self) -> None:
        self.verdict.setText("Probing this machine… (a few seconds; the window stays usable)")
        set_status_style(self.verdict, "muted")
        self.reprobe_button.setEnabled(False)
        self.state.reprobe(refresh=True)

    def _failed(self, error: BaseException) -> None:
        self.reprobe_button.setEnabled(True)
        self.verdict.setText(f"The probe could not run: {getattr(error, 'message', None) or error}")
        set_status_style(self.verdict, "problem")

    def show_probe(self, result: Any) -> None:
        from guiapp.system.capabilities import describe_device, device_verdict

        self.reprobe_button.setEnabled(True)
        self.verdict.setText("\n".join(device_verdict(result, device) for device in result.devices)
                             + (f"\nThe probe did not finish: {result.problem}. Re-probe to try again."
                                if result.problem else ""))
        set_status_style(self.verdict, "warning" if result.problem else None)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(result.probed_at)) if result.probed_at else "never"
        versions = ", ".join(f"{k} {v}" for k, v in result.versions.items())
        text = f"Probed {when} in {result.duration_seconds:.1f} s ({versions})."
        self.summary.setText(text)
        set_status_style(self.summary, "muted")
        current = self.device_combo.currentData()
        self.device_combo.blockSignals(True)
        self.device_combo.clear()
        for device in result.devices:
            self.device_combo.addItem(describe_device(device), device["id"])
        self.device_combo.blockSignals(False)
        index = self.device_combo.findData(current)
        self.device_combo.setCurrentIndex(max(index, 0))
        self._show_device()
        if self.isVisible():
            self._show_memory()

    def _show_memory(self) -> None:
        def facts() -> str:
            from guiapp.jobs.account import model_cache_folder
            from guiapp.system.resources import disk, memory
            from guiapp.system.units import format_bytes

            ram = memory()
            lines = [f"RAM: {format_bytes(ram.available)} available of {format_bytes(ram.total)}."]
            for device in (self.state.probe.devices if self.state.probe else []):
                if device["kind"] != "cpu" and device.get("memory_total"):
                    free = f"{format_bytes(device['memory_free'])} free of " if device.get("memory_free") else ""
                    lines.append(f"VRAM on {device['id']}: {free}{format_bytes(device['memory_total'])}.")
            if len(lines) == 1:
                lines.append("VRAM: no GPU found by this PyTorch build.")
            space = disk(model_cache_folder())
            lines.append(f"Disk: {format_bytes(space.free)} free of {format_bytes(space.total)} at {space.path} "
                         "(the model cache).")
            return "\n".join(lines)

        call_in_background(facts, self.memory.setText, lambda e: self.memory.setText(str(e)))

    def _show_device(self) -> None:
        from guiapp.system.capabilities import JOB_OPERATIONS, check_words, dtype_options
        from guiapp.system.probe import PACKED
        from guiapp.system.report import dequantizers_line

        result, device = self.state.probe, self.device_combo.currentData()
        if result is None or device is None:
            return
        self.jobs_table.setColumnCount(len(PROBED))
        self.jobs_table.setHorizontalHeaderLabels(list(PROBED))
        self.jobs_table.setRowCount(len(JOB_OPERATIONS))
        self.jobs_table.setVerticalHeaderLabels([JOB_WORDS[job] for job in JOB_OPERATIONS])
        for row, job in enumerate(JOB_OPERATIONS):
            for column, choice in enumerate(dtype_options(result, job, device)):
                if not choice.possible:
                    item = _cell("✗ no", choice.reason, "problem")
                elif choice.slow:
                    item = _cell("slow", choice.note, "warning")
                else:
                    item = _cell("✓ yes", choice.note or "works", "good")
                self.jobs_table.setItem(row, column, item)
        rows_height = sum(self.jobs_table.rowHeight(r) for r in range(self.jobs_table.rowCount()))
        self.jobs_table.setFixedHeight(rows_height + self.jobs_table.horizontalHeader().height() + 4)
        operations = list(dict.fromkeys(c.operation for c in result.checks if c.device == device and c.dtype != PACKED))
        self.matrix.setToolTip(dequantizers_line(result, device))
        self.matrix.setColumnCount(len(PROBED))
        self.matrix.setHorizontalHeaderLabels(list(PROBED))
        self.matrix.setRowCount(len(operations))
        self.matrix.setVerticalHeaderLabels(operations)
        for row, operation in enumerate(operations):
            for column, dtype in enumerate(PROBED):
                check = result.check(device, dtype, operation)
                kind = "muted" if check is None else "good" if check.ok else "problem"
                item = _cell("?" if check is None else "✓" if check.ok else "✗", check_words(check, device), kind)
                self.matrix.setItem(row, column, item)


def _table(name: str) -> QTableWidget:
    table = QTableWidget(accessibleName=name)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
    return table


def _cell(text: str, tooltip: str | None, kind: str) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setToolTip(tooltip or "")
    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
    item.setForeground(QBrush(QColor(status_colour(kind))))
    return item
