"""Editors built from a merge method's parameter schema (`ParamSpec`): the UI never names a parameter.

A number gets a slider with a numeric entry beside it (the slider only where the schema gives a range); a
boolean a check box. Labels are plain words (`guiapp.jobs.plain_words`), the recipe key in the tooltip. A number's
"All layers / Per layer" choice (same for all layers, or changing across them) turns it into a free YAML value,
which is how gradients across layers (`[0.1, 0.5, 0.9]`) and filters (`[{filter: self_attn, value: 0.5},
{value: 0.3}]`) are entered.

A picture of a gradient plugs in through `ParamEditor.gradient_view_factory`: when set, it is called with the
editor and the widget it returns is shown under the list while "Per layer" is chosen; it follows
`gradient_changed` and writes back with `set_gradient`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QSlider,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.layer_gradients import gradient_in_words
from guiapp.jobs.plain_words import parameter_label, parameter_tooltip
from guiapp.jobs.recipe_fixes import suggested_value
from guiapp.jobs.recipe_text import value_from_text, value_text
from guiapp.ui.theme import set_status_style

SLIDER_STEPS = 1000
SAME_FOR_ALL_LAYERS, CHANGES_ACROSS_LAYERS = "All layers", "Per layer"
UNBOUNDED = 1e6


class ParamEditor(QWidget):
    """One parameter's value. `value()` is None while the user has not set it (the method's default applies)."""

    changed = Signal()
    gradient_changed = Signal(object)  # the list typed for "Changes across layers" (parsed), for a chart
    # Makes the picture shown under a gradient (engineer-pluggable, see the module's docstring); None: no picture.
    gradient_view_factory: ClassVar[Callable[[ParamEditor], QWidget] | None] = None

    def __init__(self, spec: Any, parent: QWidget | None = None, *, compact: bool = False) -> None:
        """`compact` leaves the slider out (the number box stays) and puts "All layers / Per layer" under the
        number: for a table's narrow cells."""
        super().__init__(parent)
        self.spec = spec
        self.compact = compact
        self._explicit = False
        self._updating = False
        self.gradient_view: QWidget | None = None
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        layout = QHBoxLayout()
        layout.setContentsMargins(2, 0, 2, 0)
        layout.setSpacing(3)
        column.addLayout(layout)
        tip = parameter_tooltip(spec)
        self.setToolTip(tip)
        self.check: QCheckBox | None = None
        self.slider: QSlider | None = None
        self.spin: QDoubleSpinBox | None = None
        self.text = QLineEdit(placeholderText="[0.2, 0.5, 0.8] or [{filter: mlp, value: 0.5}]")
        self.text.setToolTip("A list of numbers is a gradient from the first layer to the last; a list of "
                             "{filter, value} entries sets values by tensor name.")
        self.text.setVisible(False)
        self.text.textEdited.connect(self._text_edited)
        self.text.editingFinished.connect(lambda: self._show_list_as(self._parsed_text()))
        # Beside a gradient's chart (the editor of a list of numbers) the list is said in words; a click types it.
        self.summary = QToolButton(autoRaise=True)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.summary.setVisible(False)
        self.summary.clicked.connect(self._type_the_list)
        if spec.kind == "bool":
            self.check = QCheckBox(accessibleName=parameter_label(spec))
            self.check.toggled.connect(self._user_changed)
            layout.addWidget(self.check)
        else:
            self.spin = QDoubleSpinBox(accessibleName=parameter_label(spec))
            tiny = _is_tiny(suggested_value(spec)) or (spec.span[1] or 1) < 0.1
            self.spin.setDecimals(0 if spec.kind == "int" else TINY_DECIMALS if tiny else 4)
            self.spin.setSingleStep(1 if spec.kind == "int" else 0.05)
            # Any number can be typed or read from the YAML and is kept as it is (a box clamping 1.5 to 1 made the
            # form and the recipe disagree); one outside the schema's range is marked here and said by the check.
            self.spin.setRange(-UNBOUNDED, UNBOUNDED)
            self.spin.setMinimumWidth(72)
            self.spin.valueChanged.connect(self._spin_changed)
            self.slider_scale = _slider_scale(spec)
            self.slider = QSlider(Qt.Orientation.Horizontal, accessibleName=f"{parameter_label(spec)} slider")
            self.slider.setRange(0, SLIDER_STEPS)
            self.slider.setMinimumWidth(50)
            self.slider.setToolTip(f"{tip}\nThe slider covers {self.slider_scale.describe()}; "
                                   "type any other value in the box.")
            self.slider.valueChanged.connect(self._slider_changed)
            layout.addWidget(self.slider, 1)
            layout.addWidget(self.spin)
            # Only once it has a parent: showing a parentless widget opens it as a window of its own.
            self.slider.setVisible(not compact)
            self.layers_choice = QComboBox(accessibleName=f"{parameter_label(spec)}: same or changing")
            # Short words, so a models table's row stays narrow; the tooltips say them in full.
            self.layers_choice.addItem(SAME_FOR_ALL_LAYERS, False)
            self.layers_choice.addItem(CHANGES_ACROSS_LAYERS, True)
            self.layers_choice.setItemData(0, "Same for all layers: one value for the whole model",
                                           Qt.ItemDataRole.ToolTipRole)
            self.layers_choice.setItemData(1, "Changes across layers: a gradient from the first layer to the last "
                                           "(a list of numbers), or values by tensor name", Qt.ItemDataRole.ToolTipRole)
            self.layers_choice.setToolTip("Same for all layers, or changes across layers (a gradient)")
            self.layers_choice.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            self.layers_choice.currentIndexChanged.connect(lambda _: self._list_toggled(self.varies_by_layer()))
            layout.addWidget(self.text, 1)
            layout.addWidget(self.summary, 1)
            if compact:  # under the number, so the table's column stays narrow
                choice_row = QHBoxLayout()
                choice_row.setContentsMargins(2, 0, 2, 0)
                choice_row.addWidget(self.layers_choice)
                choice_row.addStretch()
                column.addLayout(choice_row)
            else:
                layout.addWidget(self.layers_choice)
            if ParamEditor.gradient_view_factory is not None:
                self.gradient_view = ParamEditor.gradient_view_factory(self)
                self.gradient_view.setVisible(False)
                column.addWidget(self.gradient_view)
        column.addStretch(1)  # in a cell taller than the editor (a row with a chart), the editor stays at the top
        self.set_value(None)

    # --- public ---------------------------------------------------------------------------------------------

    def value(self) -> Any:
        if not self._explicit:
            return None
        if self.check is not None:
            return self.check.isChecked()
        if self.varies_by_layer():
            return self._parsed_text()
        number = self.spin.value()
        return int(number) if self.spec.kind == "int" else round(number, self.spin.decimals())

    def set_value(self, value: Any) -> None:
        """Show `value` (None: the default, not written to the recipe) without emitting `changed`."""
        self._updating = True
        try:
            self._explicit = value is not None
            shown = self.spec.default if value is None else value
            if self.check is not None:
                self.check.setChecked(bool(shown))
            elif isinstance(shown, (list, dict)):
                self._choose_layers(True)
                self.text.setText(value_text(shown))
                self._show_list_as(shown)
                self.gradient_changed.emit(shown)
            else:
                self._choose_layers(False)
                number = float(shown) if isinstance(shown, (int, float)) else 0.0
                self.spin.setValue(number)
                self._sync_slider(number)
                self._mark_range(number)
        finally:
            self._updating = False

    def set_explicit_default(self) -> None:
        """Write the shown value into the recipe (new model rows start with their weights visible)."""
        self._explicit = True

    def input_widget(self) -> QWidget:
        """The control a user types or ticks the value in (the check box, the number box, or the list box)."""
        if self.check is not None:
            return self.check
        return self.text if self.varies_by_layer() else self.spin

    def varies_by_layer(self) -> bool:
        """Whether "Per layer" (changes across layers) is chosen: the value is a list."""
        return self.check is None and bool(self.layers_choice.currentData())

    def set_gradient(self, values: list[Any]) -> None:
        """Make the value the list `values` (numbers: a gradient from the first layer to the last; or
        `{filter, value}` entries), as the user's change (a chart calls it when a point is dragged)."""
        self._choose_layers(True)
        self.text.setText(value_text(values))
        self._text_edited(self.text.text())
        self._show_list_as(values)

    # --- internals ------------------------------------------------------------------------------------------

    def _parsed_text(self) -> Any:
        return value_from_text(self.text.text())

    def _user_changed(self, *_: Any) -> None:
        if not self._updating:
            self._explicit = True
            self.changed.emit()

    def _spin_changed(self, number: float) -> None:
        if self._updating:
            return
        self._updating = True
        self._sync_slider(number)
        self._mark_range(number)
        self._updating = False
        self._user_changed()

    def _slider_changed(self, position: int) -> None:
        if self._updating:
            return
        self._updating = True
        self.spin.setValue(self.slider_scale.value_at(position))
        self._updating = False
        self._user_changed()

    def _sync_slider(self, number: float) -> None:
        self.slider.setValue(self.slider_scale.position_of(number))

    def _mark_range(self, number: float) -> None:
        mark_range(self.spin, number, self.spec.minimum, self.spec.maximum)

    def _choose_layers(self, varies: bool) -> None:
        self.layers_choice.setCurrentIndex(1 if varies else 0)

    def _list_toggled(self, on: bool) -> None:
        self.spin.setVisible(not on)
        self.slider.setVisible(not on and not self.compact)
        if self.gradient_view is not None:
            self.gradient_view.setVisible(on)
        if on and not self._updating and not self.text.text():
            self.text.setText(f"[{self.spin.value():g}, {self.spin.value():g}]")
            self.gradient_changed.emit(self._parsed_text())
        if on:
            self._show_list_as(self._parsed_text())
        else:
            self.text.setVisible(False)
            self.summary.setVisible(False)
        self._user_changed()

    def _text_edited(self, _: str) -> None:
        parsed = self._parsed_text()
        set_status_style(self.text, "problem" if isinstance(parsed, str) else None)
        if isinstance(parsed, list):
            self.gradient_changed.emit(parsed)
        if gradient_in_words(parsed) is None:  # filters or a half-typed list: shown as written
            self._show_list_as(parsed)
        self._user_changed()

    def _show_list_as(self, value: Any) -> None:
        """Say a list of numbers in words when its chart is shown (the chart is its editor), else show the list as
        written in its box (values by tensor name, a list being typed, no chart)."""
        words = gradient_in_words(value) if self.gradient_view is not None else None
        typing = self.text.isVisible() and self.text.hasFocus()
        in_words = words is not None and not typing
        if in_words:
            self.summary.setText(" → ".join(f"{v:g}" for v in value) if self.compact else words)
            self.summary.setToolTip(f"{words}. Drag the points on the chart to change them, or click to type the "
                                    "list.")
        self.summary.setVisible(in_words)
        self.text.setVisible(not in_words)

    def _type_the_list(self) -> None:
        self.summary.setVisible(False)
        self.text.setVisible(True)
        self.text.setFocus()


# A parameter whose usual value (`suggested_value`: its default, else the value the window offers) is below this (a
# tolerance, a threshold) is shown to 8 decimals, and its slider moves through powers of ten (TINY_DECADES either side
# of the usual value, within what the box shows) rather than evenly.
TINY = 1e-3
TINY_DECIMALS = 8
TINY_DECADES = 2


@dataclass(frozen=True)
class SliderScale:
    """Which value each slider position (0 to SLIDER_STEPS) stands for: evenly spaced from `low` to `high`, or,
    `logarithmic`, evenly spaced powers of ten (each power of ten gets as much of the slider as the next)."""

    low: float
    high: float
    logarithmic: bool = False

    def value_at(self, position: int) -> float:
        fraction = position / SLIDER_STEPS
        if not self.logarithmic:
            return self.low + (self.high - self.low) * fraction
        return float(f"{self.low * (self.high / self.low) ** fraction:.2g}")  # 0.00012, not 0.000120226

    def position_of(self, value: float) -> int:
        """The position nearest `value`; a value outside the span rests the slider at its nearer end."""
        value = min(max(value, self.low), self.high)
        if not self.logarithmic:
            return round((value - self.low) / (self.high - self.low) * SLIDER_STEPS)
        return round(math.log(value / self.low) / math.log(self.high / self.low) * SLIDER_STEPS)

    def describe(self) -> str:
        """The span in the user's words: "0.000001 to 0.01, a power of ten at a time"."""
        span = f"{_plain_number(self.low)} to {_plain_number(self.high)}"
        return f"{span}, a power of ten at a time" if self.logarithmic else span


def allowed_range(spec: Any) -> str | None:
    """The schema's range in words ("between 0 and 1", "at least 0"), or None when any number is allowed."""
    return range_words(spec.minimum, spec.maximum)


def mark_range(box: QWidget, number: float, low: float | None, high: float | None, tip: str = "") -> bool:
    """Mark a number box whose `number` is outside `low`..`high` (None: no bound), its tooltip saying the range
    (else `tip`); a box takes any number and keeps it as typed, the page blocks its job. True when outside."""
    allowed = range_words(low, high)
    outside = allowed is not None and not ((low is None or number >= low) and (high is None or number <= high))
    set_status_style(box, "problem" if outside else None)
    box.setToolTip(f"{_plain_number(number)} is outside the allowed range: it must be {allowed}." if outside else tip)
    return outside


def nearest_allowed(number: float, low: float | None, high: float | None) -> float:
    """The allowed value nearest `number`: the bound it is past, else itself."""
    return max(low, number) if low is not None and number < low else min(high, number) if high is not None else number


def range_words(low: float | None, high: float | None) -> str | None:
    """A range in words ("between 0 and 1", "at least 0"), or None when any number is allowed."""
    if low is not None and high is not None:
        return f"between {_plain_number(low)} and {_plain_number(high)}"
    if low is not None:
        return f"at least {_plain_number(low)}"
    return f"at most {_plain_number(high)}" if high is not None else None


def _is_tiny(value: float) -> bool:
    return 0 < abs(value) < TINY


def _plain_number(value: float) -> str:
    """`value` without an exponent (0.000001, not 1e-06), which users outside programming read."""
    return f"{value:.{TINY_DECIMALS}f}".rstrip("0").rstrip(".") if _is_tiny(value) else f"{value:g}"


def _slider_scale(spec: Any) -> SliderScale:
    """The slider's span: the schema's usual range (else its allowed one), or where a parameter without one sensibly
    lives (0 to 1 for a weight, up to twice a larger default); a parameter whose usual value is tiny moves through
    the powers of ten around it. The numeric box still takes any value the schema allows."""
    usual = suggested_value(spec)  # its default, else what the window offers for it
    span_low, span_high = spec.span
    if _is_tiny(usual) and usual > 0 and (span_low or 0) >= 0:
        # No lower than the number box shows, nor higher than the schema's range.
        low, high = max(usual / 10**TINY_DECADES, 10**-TINY_DECIMALS), usual * 10**TINY_DECADES
        if span_high is not None:
            high = min(high, span_high)
        if high > low:
            return SliderScale(low, high, logarithmic=True)
    low = span_low if span_low is not None else (min(0.0, spec.default or 0.0) * 2)
    default = abs(spec.default or 0.0)
    high = span_high if span_high is not None else max(1.0, 2 * default)
    return SliderScale(float(low), float(high) if high > low else float(low) + 1.0)


class ParamForm(QWidget):
    """The method-wide parameters of a method, one labelled editor per `ParamSpec`."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.layout_ = QFormLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.editors: dict[str, ParamEditor] = {}

    def set_specs(self, specs: tuple[Any, ...]) -> None:
        while self.layout_.rowCount():
            self.layout_.removeRow(0)
        self.editors = {}
        for spec in specs:
            editor = ParamEditor(spec)
            editor.changed.connect(self.changed)
            label = QLabel(f"{parameter_label(spec)}{' *' if spec.required else ''}")
            label.setToolTip(parameter_tooltip(spec))
            label.setBuddy(editor.spin or editor.check)
            self.layout_.addRow(label, editor)
            self.editors[spec.name] = editor
        if not specs:
            self.layout_.addRow(QLabel("This method has no method-wide parameters."))

    def values(self) -> dict[str, Any]:
        return {name: editor.value() for name, editor in self.editors.items() if editor.value() is not None}

    def set_values(self, values: dict[str, Any]) -> None:
        for name, editor in self.editors.items():
            editor.set_value(values.get(name))
