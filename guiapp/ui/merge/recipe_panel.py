"""The Merge page's recipe panel: the live mergekit YAML, editable, with import and export."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from guiapp.ui.merge.messages import show_message
from guiapp.ui.widgets.wrapping_label import WrappingLabel

YAML_DELAY_MS = 400


class RecipePanel(QWidget):
    edited = Signal()  # the user changed the text (debounced), or imported a file

    def __init__(self) -> None:
        super().__init__()
        self._showing = False  # the text is being set from the document, not typed
        self._timer = QTimer(self, singleShot=True, interval=YAML_DELAY_MS)
        self._timer.timeout.connect(self.edited)
        layout = QVBoxLayout(self)
        layout.addWidget(WrappingLabel("<b>Recipe (mergekit YAML)</b> — edit it and the form follows"))
        self.yaml_edit = QPlainTextEdit(accessibleName="Recipe YAML")
        self.yaml_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.yaml_edit.setTabChangesFocus(True)
        self.yaml_edit.textChanged.connect(lambda: self._showing or self._timer.start())
        layout.addWidget(self.yaml_edit, 1)
        self.yaml_message = WrappingLabel(visible=False)
        layout.addWidget(self.yaml_message)
        file_row = QHBoxLayout()
        self.import_button = QPushButton("Import .yml…")
        self.import_button.clicked.connect(lambda: self.import_recipe())
        self.export_button = QPushButton("Export .yml…")
        self.export_button.clicked.connect(lambda: self.export_recipe())
        file_row.addWidget(self.import_button)
        file_row.addWidget(self.export_button)
        file_row.addStretch()
        layout.addLayout(file_row)

    def text(self) -> str:
        return self.yaml_edit.toPlainText()

    def show_text(self, text: str) -> None:
        """Show the document's YAML (keeping the scroll position), clearing any message."""
        self._showing = True
        scroll = self.yaml_edit.verticalScrollBar().value()
        self.yaml_edit.setPlainText(text)
        self.yaml_edit.verticalScrollBar().setValue(scroll)
        self._showing = False
        show_message(self.yaml_message, None)

    def flush(self) -> None:
        """Apply a typed edit now instead of after the delay (before a run)."""
        if self._timer.isActive():
            self._timer.stop()
            self.edited.emit()

    def import_recipe(self, path: str | None = None) -> None:
        path = path or QFileDialog.getOpenFileName(self, "Import a recipe", "", "Recipes (*.yml *.yaml)")[0]
        if path:
            from guiapp.errors import RecipeError
            from guiapp.system.bounded import RECIPE_BYTES, read_text_limited

            try:  # a pipe, a weights file or binary data chosen by mistake is said, never read whole
                self.yaml_edit.setPlainText(read_text_limited(Path(path), RECIPE_BYTES, RecipeError, what="recipe"))
            except RecipeError as error:
                show_message(self.yaml_message, f"Cannot open it: {error.message}", "problem")
                return
            self._timer.stop()
            self.edited.emit()

    def export_recipe(self, path: str | None = None) -> None:
        path = path or QFileDialog.getSaveFileName(self, "Export the recipe", "recipe.yml", "Recipes (*.yml *.yaml)")[0]
        if path:
            try:
                Path(path).write_text(self.text(), encoding="utf-8")
            except OSError as error:
                show_message(self.yaml_message, f"Cannot write {path}: {error.strerror}.", "problem")
                return
            show_message(self.yaml_message, f"Saved {path}.", "good")
