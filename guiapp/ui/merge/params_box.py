"""The Merge page's Method parameters box: the method's method-wide values, and the check's words about them."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QGroupBox, QVBoxLayout, QWidget

from guiapp.ui.widgets.param_form import ParamForm
from guiapp.ui.widgets.wrapping_label import WrappingLabel


class ParamsBox(QGroupBox):
    """The parameters form built from the chosen method's declarations, with a message line under it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Method parameters", parent)
        layout = QVBoxLayout(self)
        self.param_form = ParamForm()
        self.params_message = WrappingLabel(visible=False)
        layout.addWidget(self.param_form)
        layout.addWidget(self.params_message)

    def show_values(self, method: Any, values: dict[str, Any]) -> None:
        """Show `method`'s method-wide parameters with `values` (a missing one shows its default)."""
        self.param_form.set_specs(method.global_params)
        self.param_form.set_values(values)
