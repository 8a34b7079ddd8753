"""Which control of the Merge page fixes a problem: from the recipe key the problem names (and, for a model that
cannot be read, the reference its message names) to the widget to focus; keys the form has no field for are
shown at their line in the recipe's YAML.
"""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QWidget

from guiapp.errors import KeyPath
from guiapp.ui.widgets.attention import draw_attention


def point_at(page: Any, key: KeyPath, message: str) -> bool:
    """Show the user the control of the Merge `page` that fixes a problem at `key` (whose text is `message`): the
    Advanced section opened when it is there, the YAML view's cursor on the key's line when it is the recipe's
    text; focused and outlined. False when there is nothing to point at."""
    widget = control_for(page, key, message)
    if widget is None:
        return False
    if page.advanced.isAncestorOf(widget):
        page.advanced.advanced_button.setChecked(True)
    if widget is page.yaml_edit:
        cursor = page.yaml_edit.textCursor()
        cursor.setPosition(yaml_position(page.yaml_edit.toPlainText(), key) or 0)
        cursor.movePosition(QTextCursor.MoveOperation.StartOfBlock)
        page.yaml_edit.setTextCursor(cursor)
        page.yaml_edit.ensureCursorVisible()
    draw_attention(widget)
    return True


def control_for(page: Any, key: KeyPath, message: str) -> QWidget | None:
    """The widget of the Merge `page` that fixes a problem at `key` (whose text is `message`), or None when
    neither the form nor the YAML view can point at it. Changes nothing on the page."""
    top = str(key[0]) if key else ""
    if top == "merge_method":
        return page.method_combo
    if top == "base_model":
        return page.base_picker.combo
    if top == "models" and len(key) == 1:
        return _named_in(page, message) or page.add_model_picker.combo
    if top == "models" and isinstance(key[1], int):
        return _model_control(page, key[1], key[2:])
    if top == "parameters" and len(key) == 2 and key[1] in page.param_form.editors:
        return page.param_form.editors[key[1]].input_widget()
    if top == "output":
        return page.output_edit
    if top == "out_dtype":
        return page.dtype_combo
    if top == "tokenizer_source":
        shown = page.advanced.tokenizer_model
        return shown if not shown.isHidden() else page.advanced.tokenizer_combo
    if top == "chat_template":
        return page.advanced.chat_template_combo
    if top == "slices":
        return page.advanced.slices_control()
    return _yaml_line(page, key)


def _model_control(page: Any, row: int, rest: KeyPath) -> QWidget | None:
    """The `row`-th model's reference, or its editor of the parameter `rest` names; past the table's last row,
    the base (a method that merges the base as one more input counts it after the listed models)."""
    reference = page.table.reference_widget(row)
    if reference is None:
        return page.base_picker.combo if page.base_picker.text() else None
    if len(rest) == 2 and rest[0] == "parameters":
        editor = page.table.editor(row, str(rest[1]))
        return editor.input_widget() if editor is not None else _yaml_line(page, ("models", row, *rest))
    return reference


def _named_in(page: Any, message: str) -> QWidget | None:
    """The field holding the model reference `message` names (a model that cannot be read): a row, the base or the
    tokenizer's model; the longest reference wins, so `org/a` does not claim a message about `org/a-v2`."""
    fields = [page.table.reference_widget(row) for row in range(page.table.rowCount())]
    fields += [page.base_picker.combo.lineEdit(), page.advanced.tokenizer_model]
    named = [(len(field.text().strip()), index, field) for index, field in enumerate(fields)
             if field is not None and field.text().strip() and field.text().strip() in message]
    if not named:
        return None
    field = max(named, key=lambda item: (item[0], -item[1]))[2]
    return page.base_picker.combo if field is page.base_picker.combo.lineEdit() else field


def _yaml_line(page: Any, key: KeyPath) -> QWidget | None:
    """The YAML view when its text has a line for `key`, else None."""
    return page.yaml_edit if yaml_position(page.yaml_edit.toPlainText(), key) is not None else None


def yaml_position(text: str, key: KeyPath) -> int | None:
    """Where the line of `key` starts in the YAML `text` (block style, as the view writes it): each name of the
    path is looked for after the line of the one before it; an index picks the n-th list item of that level.
    None when the first name is not a top-level key of the text."""
    position = 0
    for depth, part in enumerate(key):
        if isinstance(part, int):
            items = list(re.finditer(r"^\s*- ", text[position:], re.MULTILINE))
            if part >= len(items):
                return position
            position += items[part].start()
            continue
        indent = "" if depth == 0 else r"[ \t-]*"
        found = re.search(rf"^{indent}{re.escape(str(part))}:", text[position:], re.MULTILINE)
        if found is None:
            return None if depth == 0 else position
        position += found.start()
    return position
