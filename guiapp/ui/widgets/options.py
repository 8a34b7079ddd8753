"""A dropdown whose impossible entries stay visible, disabled, with the reason as text and tooltip.

The device and dtype dropdowns are fed from `guiapp.system.capabilities`: a user sees that bfloat16 on this GPU
is not offered and why, instead of finding out from a crash.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QComboBox, QWidget


@dataclass(frozen=True)
class Choice:
    value: str | None
    label: str
    enabled: bool = True
    reason: str = ""


class OptionCombo(QComboBox):
    """`choice_changed(value)` fires when the user picks an entry; `set_choices` keeps the pick when it can."""

    choice_changed = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = QStandardItemModel(self)
        self.setModel(self._model)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(18)
        self.activated.connect(lambda index: self.choice_changed.emit(self.itemData(index)))

    def set_choices(self, choices: list[Choice], keep: str | None = None) -> None:
        current = keep if keep is not None else self.value()
        self.blockSignals(True)
        self._model.clear()
        for choice in choices:
            item = QStandardItem(choice.label)
            item.setData(choice.value, Qt.ItemDataRole.UserRole)
            item.setEnabled(choice.enabled)
            item.setToolTip(choice.reason or choice.label)
            self._model.appendRow(item)
        self.blockSignals(False)
        self.select(current)

    def select(self, value: str | None) -> bool:
        """Pick the entry holding `value` if it is enabled; otherwise the first enabled one. True if picked.

        When nothing is enabled the first entry is shown anyway: its text says why it cannot be used.
        """
        for row in range(self._model.rowCount()):
            item = self._model.item(row)
            if item.data(Qt.ItemDataRole.UserRole) == value and item.isEnabled():
                self.setCurrentIndex(row)
                return True
        first = next((r for r in range(self._model.rowCount()) if self._model.item(r).isEnabled()), 0)
        self.setCurrentIndex(first if self._model.rowCount() else -1)
        return False

    def value(self) -> str | None:
        return self.currentData(Qt.ItemDataRole.UserRole) if self.currentIndex() >= 0 else None

    def is_enabled_choice(self, value: str | None) -> bool:
        return any(self._model.item(r).data(Qt.ItemDataRole.UserRole) == value and self._model.item(r).isEnabled()
                   for r in range(self._model.rowCount()))


def device_choices(probe, job: str) -> list[Choice]:
    """The device dropdown for `job` from the probe (just the CPU until the probe is in)."""
    if probe is None:
        return [Choice("cpu", "CPU")]
    from guiapp.system.capabilities import device_options  # only once there is a probe

    return [Choice(d.device, d.label if d.possible else f"{d.label} (not available: {d.reason})", d.possible,
                   d.reason or "") for d in device_options(probe, job)]


def dtype_choices(probe, job: str, device: str, dtypes: tuple[str, ...], default_label: str,
                  sizes: dict[str | None, int] | None = None) -> list[Choice]:
    """The dtype dropdown: `default_label` (value None) first, then `dtypes`, impossible ones disabled.

    With `sizes` (the output's size in bytes per dtype, as far as known; may be empty) each entry reads as an
    answer, "bfloat16 — 1.2 GB (recommended)", and how it is computed goes to its tooltip."""
    from guiapp.system.units import format_bytes

    def sized(label: str, value: str | None) -> str:
        return f"{label} — {format_bytes(sizes[value])}" if sizes and value in sizes else label

    choices = [Choice(None, sized(default_label, None) if sizes is not None else default_label)]
    if probe is None:
        return choices + [Choice(d, d) for d in dtypes]
    from guiapp.system.capabilities import dtype_options, recommended_storage  # only once there is a probe

    options = {o.storage_dtype: o for o in dtype_options(probe, job, device)}
    if sizes is None:
        return choices + [Choice(d, options[d].label, options[d].possible, options[d].reason or options[d].note)
                          for d in dtypes]
    best = recommended_storage(probe, job, device)
    for dtype in dtypes:
        chosen = options[dtype]
        label = sized(dtype, dtype) if chosen.possible else chosen.label
        if chosen.possible and best is not None and dtype == best.storage_dtype:
            label += " (recommended)"
        elif chosen.slow:
            label += f" ({chosen.note})"
        choices.append(Choice(dtype, label, chosen.possible, chosen.reason or chosen.note))
    return choices
