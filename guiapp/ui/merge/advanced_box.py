"""The Merge page's Advanced section: the result's tokenizer and chat template, and slices (a table, or their YAML),
folded away until asked for. Recipes with `modules:` stay in the YAML view."""

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

from guiapp.jobs.merge_choices import chat_template_names
from guiapp.jobs.recipe_document import parse_slices
from guiapp.jobs.recipe_text import slices_text
from guiapp.ui.merge.slices_editor import SlicesTable, table_rows
from guiapp.ui.widgets.wrapping_label import WrappingLabel

SLICES_HELP = ("Slices build the result from ranges of layers, in order: each row takes the layers From up to "
               "(not including) To of its model. With slices the models table is not used.")
SLICES_ONLY_AS_YAML = ("These slices combine several models in one slice (or have values of their own): edit them as "
                       "YAML.")

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
        # Its longest choice is elided rather than widening the form past the smallest window (the list shows it).
        self.tokenizer_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.tokenizer_combo.setMinimumContentsLength(24)
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
        for name in chat_template_names():
            self.chat_template_combo.addItem(name, name)
        self.chat_template_combo.setToolTip("The chat template written into the result's tokenizer settings "
                                            "(recipe key: chat_template). A template of your own goes in the YAML.")
        self.chat_template_combo.currentIndexChanged.connect(lambda _: self.changed.emit())
        form.addRow("Chat template", self.chat_template_combo)

        self._table_can_show = True  # the slices are ones the table can show
        slices = QWidget()
        slices_column = QVBoxLayout(slices)
        slices_column.setContentsMargins(0, 0, 0, 0)
        slices_column.addWidget(WrappingLabel(SLICES_HELP))
        self.slices_table = SlicesTable()
        self.slices_table.edited.connect(self._slices_table_edited)
        slices_column.addWidget(self.slices_table)
        self.slices_yaml_button = QToolButton(text="Edit as YAML", checkable=True)
        self.slices_yaml_button.setToolTip("Show the slices as the recipe writes them, to edit them as text")
        self.slices_yaml_button.toggled.connect(lambda _: self._show_slices_editor())
        slices_column.addWidget(self.slices_yaml_button)
        self.slices_yaml_note = WrappingLabel(SLICES_ONLY_AS_YAML, visible=False)
        slices_column.addWidget(self.slices_yaml_note)
        self.slices_edit = QPlainTextEdit(placeholderText="- sources:\n  - model: org/a\n    layer_range: [0, 16]\n"
                                          "  - model: org/b\n    layer_range: [0, 16]")
        self.slices_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.slices_edit.setMaximumHeight(140)
        self.slices_edit.setTabChangesFocus(True)
        self._writing_slices = False  # the table is writing the YAML box: the table need not follow it
        self.slices_edit.textChanged.connect(self._slices_text_changed)
        slices_column.addWidget(self.slices_edit)
        form.addRow("Slices", slices)
        self.slices_message = WrappingLabel(visible=False)
        form.addRow("", self.slices_message)
        form.addRow(WrappingLabel("Values that change across the layers: choose “Per layer” beside a number in the "
                                  "models table or the method parameters, and drag the points of its chart. Recipes "
                                  "with modules: are edited in the YAML view."))
        self._show_slices_editor()
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
        self.slices_edit.setPlainText(slices_text(slices))
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

    def slices_control(self) -> QWidget:
        """The slices' editor shown now: the table, or the YAML box."""
        return self.slices_edit if self.slices_edit.isVisibleTo(self.advanced) else self.slices_table.table

    def _slices_table_edited(self, slices: Any) -> None:
        self._writing_slices = True
        try:
            self.slices_edit.setPlainText(slices_text(slices))
        finally:
            self._writing_slices = False

    def _slices_text_changed(self) -> None:
        """The table follows the YAML box (a recipe shown, or text typed) when it can show what it holds."""
        text = self.slices_edit.toPlainText()
        if not self._writing_slices:
            parsed = parse_slices(text)
            rows = [] if parsed is None else table_rows(parsed)
            if rows is not None:
                self.slices_table.show_rows(rows)
            self._show_slices_editor(table_can_show=rows is not None or isinstance(parsed, str))
        self.slices_changed.emit(bool(text.strip()))

    def _show_slices_editor(self, table_can_show: bool | None = None) -> None:
        """The table, or the YAML box when asked for ("Edit as YAML") or when the table cannot show the slices
        (then saying why; text being typed that is not valid YAML yet keeps the box shown)."""
        if table_can_show is not None:
            self._table_can_show = table_can_show
        can_show = self._table_can_show
        if not can_show:  # stays the YAML box when they become ones the table could show, not mid-typing
            self.slices_yaml_button.blockSignals(True)
            self.slices_yaml_button.setChecked(True)
            self.slices_yaml_button.blockSignals(False)
        as_yaml = self.slices_yaml_button.isChecked() or not can_show
        self.slices_table.setVisible(not as_yaml)
        self.slices_edit.setVisible(as_yaml)
        self.slices_yaml_note.setVisible(not can_show)
        self.slices_yaml_button.setVisible(can_show)

    def _toggle(self, shown: bool) -> None:
        self.advanced.setVisible(shown)
        self.advanced_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)

