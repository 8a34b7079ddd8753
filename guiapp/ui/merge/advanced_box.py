"""The Merge page's Advanced section: the result's tokenizer and chat template, and slices (YAML), folded away
until asked for. Recipes with `modules:` stay in the YAML view."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLineEdit,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.engine.chat_template_names import BUILT_IN_CHAT_TEMPLATES
from guiapp.jobs.recipe_document import parse_slices
from guiapp.ui.widgets.wrapping_label import WrappingLabel

# tokenizer_source values the choice list names in words; any other value is a model's reference.
FROM_MODEL = "model"
TOKENIZER_CHOICES = (
    ("", "Not set: the first model's tokenizer (vocabularies must match)",
     "The result keeps the tokenizer files of the base (or first) model; models with other vocabularies are refused."),
    ("base", "The base model's",
     "The result has the base model's vocabulary; rows of tokens the other models lack come from the base."),
    ("union", "Union of all the models' vocabularies",
     "Every token of every model; a token only some models have takes its rows from those models."),
    (FROM_MODEL, "From model…",
     "The vocabulary of the model you name (one of the merged models, or another that lends only its tokenizer)."),
)
# The chat-template choice standing for Jinja text the recipe holds (kept as it is; edited in the YAML).
OWN_TEMPLATE = "Your own template (edit it in the YAML)"


class AdvancedBox(QWidget):
    changed = Signal()  # the tokenizer or the chat template was changed
    slices_changed = Signal(bool)  # the slices text was edited; True while it holds slices

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.advanced_button = QToolButton(text="Advanced: tokenizer, chat template, slices, gradients",
                                           checkable=True)
        self.advanced_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.advanced_button.setArrowType(Qt.ArrowType.RightArrow)
        self.advanced_button.toggled.connect(self._toggle)
        layout.addWidget(self.advanced_button)
        self.advanced = QGroupBox()
        form = QFormLayout(self.advanced)

        self.tokenizer_combo = QComboBox(accessibleName="Tokenizer")
        for value, label, tip in TOKENIZER_CHOICES:
            self.tokenizer_combo.addItem(label, value)
            self.tokenizer_combo.setItemData(self.tokenizer_combo.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.tokenizer_model = QLineEdit(placeholderText="org/name or a folder", accessibleName="Tokenizer from model")
        self.tokenizer_model.setToolTip("The model whose tokenizer the result uses (recipe key: tokenizer_source).")
        self.tokenizer_combo.currentIndexChanged.connect(self._tokenizer_choice_changed)
        self.tokenizer_model.textEdited.connect(lambda _: self.changed.emit())
        form.addRow("Tokenizer", self.tokenizer_combo)
        form.addRow("", self.tokenizer_model)
        self.tokenizer_model.setVisible(False)

        self.chat_template_combo = QComboBox(accessibleName="Chat template")
        self.chat_template_combo.addItem("Not set: keep the base model's", "")
        self.chat_template_combo.addItem("Auto: the one most of the models use", "auto")
        for name in BUILT_IN_CHAT_TEMPLATES:
            self.chat_template_combo.addItem(name, name)
        self.chat_template_combo.setToolTip("The chat template written into the result's tokenizer settings "
                                            "(recipe key: chat_template). A template of your own goes in the YAML.")
        self.chat_template_combo.currentIndexChanged.connect(lambda _: self.changed.emit())
        form.addRow("Chat template", self.chat_template_combo)

        self.slices_edit = QPlainTextEdit(placeholderText="- sources:\n  - model: org/a\n    layer_range: [0, 16]\n"
                                          "  - model: org/b\n    layer_range: [0, 16]")
        self.slices_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.slices_edit.setMaximumHeight(140)
        self.slices_edit.setTabChangesFocus(True)
        self.slices_edit.textChanged.connect(lambda: self.slices_changed.emit(bool(self.slices_edit.toPlainText().strip())))
        form.addRow("Slices (YAML)", self.slices_edit)
        self.slices_message = WrappingLabel(visible=False)
        form.addRow("", self.slices_message)
        form.addRow(WrappingLabel("Gradients and filters: press “list” next to any number to give a list "
                           "across layers or {filter, value} entries. Recipes with modules: are edited in the "
                           "YAML view."))
        self.advanced.setVisible(False)
        layout.addWidget(self.advanced)

    def slices(self) -> Any:
        """The slices as the recipe takes them (see `parse_slices`)."""
        return parse_slices(self.slices_edit.toPlainText())

    def tokenizer_source(self) -> str:
        """The recipe's `tokenizer_source` as chosen ("" when not set)."""
        value = self.tokenizer_combo.currentData()
        return self.tokenizer_model.text().strip() if value == FROM_MODEL else value

    def chat_template(self) -> str:
        """The recipe's `chat_template` as chosen ("" when not set; a template of the recipe's own is kept)."""
        return self.chat_template_combo.currentData()

    def show_values(self, slices: Any, tokenizer_source: str, chat_template: str = "") -> None:
        """Show a recipe's slices (opening the section when there are some), tokenizer source and chat template,
        without reporting them as edits."""
        import yaml

        self.slices_edit.setPlainText(yaml.safe_dump(slices, sort_keys=False).strip() if slices else "")
        if slices:
            self.advanced_button.setChecked(True)
        for widget in (self.tokenizer_combo, self.tokenizer_model, self.chat_template_combo):
            widget.blockSignals(True)
        try:
            named = self.tokenizer_combo.findData(tokenizer_source) if tokenizer_source != FROM_MODEL else -1
            self.tokenizer_combo.setCurrentIndex(named if named >= 0 else self.tokenizer_combo.findData(FROM_MODEL))
            self.tokenizer_model.setText("" if named >= 0 else tokenizer_source)
            self.tokenizer_model.setVisible(named < 0)
            self._show_chat_template(chat_template)
        finally:
            for widget in (self.tokenizer_combo, self.tokenizer_model, self.chat_template_combo):
                widget.blockSignals(False)

    def _show_chat_template(self, chat_template: str) -> None:
        custom = self.chat_template_combo.findText(OWN_TEMPLATE)
        if custom >= 0:
            self.chat_template_combo.removeItem(custom)
        index = self.chat_template_combo.findData(chat_template)
        if index < 0:  # Jinja text of the recipe's own: kept as it is
            self.chat_template_combo.addItem(OWN_TEMPLATE, chat_template)
            index = self.chat_template_combo.count() - 1
        self.chat_template_combo.setCurrentIndex(index)

    def _tokenizer_choice_changed(self, _: int) -> None:
        from_model = self.tokenizer_combo.currentData() == FROM_MODEL
        self.tokenizer_model.setVisible(from_model)
        if from_model:
            self.tokenizer_model.setFocus()
        self.changed.emit()

    def _toggle(self, shown: bool) -> None:
        self.advanced.setVisible(shown)
        self.advanced_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
