"""The Merge page's Method box: the methods from the registry, grouped by what the user wants to do (each group's
recommended method first and marked), with the chosen one's summary and paper."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFont, QPalette, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QComboBox, QGroupBox, QLabel, QVBoxLayout

from guiapp.ui.widgets.wrapping_label import WrappingLabel


class MethodBox(QGroupBox):
    def __init__(self) -> None:
        super().__init__("Method")
        self.methods: dict[str, Any] = {}
        layout = QVBoxLayout(self)
        self.method_combo = QComboBox(accessibleName="Merge method")
        self.method_summary = WrappingLabel()
        self.method_paper = QLabel(openExternalLinks=True)
        self.method_message = WrappingLabel(visible=False)
        for widget in (self.method_combo, self.method_summary, self.method_paper, self.method_message):
            layout.addWidget(widget)

    def set_methods(self, methods: dict[str, Any]) -> None:
        """List `methods` (name → method), without announcing a change."""
        self.methods = methods
        from guiapp.jobs.plain_words import grouped_methods

        chosen = self.method_combo.currentData()
        self.method_combo.blockSignals(True)
        rows = QStandardItemModel(self.method_combo)
        for group, names in grouped_methods(methods):
            heading = QStandardItem(group.title)  # a heading: shown, never chosen
            heading.setFlags(Qt.ItemFlag.NoItemFlags)
            font = QFont(self.method_combo.font())
            font.setBold(True)
            heading.setFont(font)
            heading.setToolTip(group.when)
            rows.appendRow(heading)
            for name in names:
                recommended = " — recommended" if name == group.recommended else ""
                item = QStandardItem(f"{methods[name].title} ({name}){recommended}")
                item.setData(name, Qt.ItemDataRole.UserRole)
                item.setToolTip(f"{group.title}: {group.when}\n{methods[name].summary}")
                rows.appendRow(item)
        self.method_combo.setModel(rows)
        if chosen is None or not self.select(chosen):
            groups = grouped_methods(methods)
            if groups:
                self.select(groups[0][0].recommended)
        self.method_combo.blockSignals(False)

    def method(self) -> Any:
        """The chosen method, or None before the methods are loaded."""
        return self.methods.get(self.method_combo.currentData())

    def select(self, name: Any) -> bool:
        """Choose the method called `name`; False when there is none by that name."""
        index = self.method_combo.findData(name) if isinstance(name, str) and name in self.methods else -1
        if index >= 0:
            self.method_combo.setCurrentIndex(index)
        return index >= 0

    def describe(self, method: Any) -> None:
        """Show `method`'s summary and paper link."""
        self.method_summary.setText(method.summary)
        # Rich text takes the link colour when set, so it is set again when the palette changes.
        link = self.palette().color(QPalette.ColorRole.Link).name()
        self.method_paper.setText(f'<a href="{method.paper}" style="color: {link}">Paper: {method.paper}</a>'
                                  if method.paper else "No paper: a standard technique.")
        self.method_paper.setToolTip(method.paper or "")

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self.method() is not None:
            self.describe(self.method())
