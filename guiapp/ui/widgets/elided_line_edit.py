"""A text field for long names (model paths, Hub ids): while it is not being edited, a text too long for it is
shown elided in the middle ("/home/me/…/tiny-chat"), so both the start and the name at the end stay visible; the
full text is its tooltip. Editing shows the whole text as usual."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter, QPalette
from PySide6.QtWidgets import QLineEdit, QStyle, QStyleOptionFrame, QWidget


class ElidedLineEdit(QLineEdit):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.textChanged.connect(self.setToolTip)
        self.setToolTip(text)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if self.hasFocus() or not self.text() or self.fontMetrics().horizontalAdvance(self.text()) <= self._room():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        option = QStyleOptionFrame()
        self.initStyleOption(option)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelLineEdit, option, painter, self)
        area = self._text_area(option)
        painter.setPen(self.palette().color(QPalette.ColorGroup.Normal if self.isEnabled()
                                            else QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
        painter.drawText(area, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                         self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideMiddle, area.width()))

    def shown_text(self) -> str:
        """The text as it is drawn now (elided when it does not fit and the field is not being edited)."""
        if self.hasFocus():
            return self.text()
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideMiddle, self._room())

    def _room(self) -> int:
        option = QStyleOptionFrame()
        self.initStyleOption(option)
        return self._text_area(option).width()

    def _text_area(self, option: QStyleOptionFrame):
        margins = self.textMargins()
        return self.style().subElementRect(QStyle.SubElement.SE_LineEditContents, option, self).adjusted(
            margins.left() + 2, margins.top(), -margins.right() - 2, -margins.bottom())
