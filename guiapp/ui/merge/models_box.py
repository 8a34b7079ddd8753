"""The Merge page's Models box: the base model, the models table, adding a model, and the compatibility verdict."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFormLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout

from guiapp.system.units import plural
from guiapp.ui.merge.models_table import ModelsTable
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.model_picker import ModelPicker
from guiapp.ui.widgets.wrapping_label import WrappingLabel

BASE_LABELS = {"required": "Base model *", "optional": "Base model (optional)", "input": "Base model"}
BASE_TIPS = {"required": "This method measures each model's changes against the base.",
             "optional": "Used as the reference when given.",
             "input": "For this method the base is just one more input."}


class ModelsBox(QGroupBox):
    changed = Signal()  # the base or a row of the table was edited
    add_requested = Signal(str)  # the user asked to add this model

    def __init__(self) -> None:
        super().__init__("Models")
        layout = QVBoxLayout(self)
        base_row = QFormLayout()
        self.base_picker = ModelPicker("The base model: org/name or a folder")
        self.base_picker.changed.connect(lambda *_: self.changed.emit())
        self.base_label = QLabel("Base model")
        self.base_label.setBuddy(self.base_picker.combo)
        base_row.addRow(self.base_label, self.base_picker)
        self.base_message = WrappingLabel(visible=False)
        base_row.addRow("", self.base_message)
        layout.addLayout(base_row)
        self.table = ModelsTable()
        self.table.changed.connect(self.changed)
        layout.addWidget(self.table)
        buttons = QHBoxLayout()
        self.add_model_picker = ModelPicker("Add a model: org/name or a folder")
        self.add_model_button = QPushButton("Add model")
        self.add_model_button.clicked.connect(self._add_clicked)
        self.add_model_picker.combo.lineEdit().returnPressed.connect(self._add_clicked)
        buttons.addWidget(self.add_model_picker, 1)
        buttons.addWidget(self.add_model_button)
        layout.addLayout(buttons)
        self.models_message = WrappingLabel(visible=False)
        self.compatibility = WrappingLabel()
        # Room for the verdict's two lines whether it is shown or not, so what is below never jumps.
        self.compatibility.setMinimumHeight(2 * self.compatibility.fontMetrics().lineSpacing())
        self.compatibility.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.models_message)
        layout.addWidget(self.compatibility)

    def set_base_role(self, role: str) -> None:
        """Label the base field by what the method does with it ("required", "optional", "input")."""
        self.base_label.setText(BASE_LABELS.get(role, "Base model"))
        self.base_picker.setToolTip(BASE_TIPS[role])

    def use_slices(self, uses_slices: bool) -> None:
        """While the recipe uses slices, the models come from there and the table is read-only."""
        self.table.setEnabled(not uses_slices)
        self.add_model_button.setEnabled(not uses_slices)
        self.table.setToolTip("This recipe uses slices (Advanced): the models come from there." if uses_slices else "")

    def show_models(self, method: Any, rows: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
        """Give the table `method`'s columns and a row per (reference, parameter values, undeclared ones kept)."""
        self.table.set_method(method)
        for reference, values, extra in rows:
            self.table.add_row(reference, values, extra)

    def mark_unused_fields(self, method: Any) -> None:
        """Disable what `method` (None: none chosen yet) ignores, saying why: a base listed among the models keeps
        its own values only with a method that merges it as one more input."""
        if method is None:
            return
        ignores_base_values = method.base_role.value != "input"
        self.table.mark_unused_base_values(
            self.base_picker.text() if ignores_base_values else None,
            f"Not used: {method.title} measures the other models' changes against the base model, so the base's "
            "own values here are ignored. Set them on the other models.")

    def show_verdict(self, result: Any) -> None:
        """The compatibility verdict of a `MergeCheck`, or the hint to add models when `result` is None."""
        if result is None:
            self.compatibility.setText("Add the models to merge: type a Hub id or a folder below the table, "
                                       "or use “Add to merge” on the Models page.")
            set_status_style(self.compatibility, "muted")
        elif result.compatible is False:
            self.compatibility.setText("✗ Not compatible as written: see above.")
            set_status_style(self.compatibility, "problem")
        elif result.compatible:
            self.compatibility.setText(f"✓ Compatible: {plural(result.models, 'model')}, "
                                       f"{plural(result.tensors, 'output tensor')}, "
                                       "checked from the files' headers.")
            set_status_style(self.compatibility, "good")
        else:
            self.compatibility.clear()

    def _add_clicked(self) -> None:
        ref = self.add_model_picker.text()
        if ref:
            self.add_requested.emit(ref)
            self.add_model_picker.set_text("", notify=False)
