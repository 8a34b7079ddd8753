"""Colours that stay legible in light and dark themes, and the colour scheme setting.

Widgets use the palette for everything else; only status colours (problem, warning, good) are chosen here, in
a darker shade on light backgrounds and a lighter one on dark backgrounds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette, QPen
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QWidget

SCHEMES = {"system": Qt.ColorScheme.Unknown, "light": Qt.ColorScheme.Light, "dark": Qt.ColorScheme.Dark}
_STATUS = {  # (on light, on dark)
    "problem": ("#b3261e", "#ff8a80"),
    "warning": ("#8a5300", "#ffcc66"),
    "good": ("#1b6e20", "#8be28f"),
    "muted": ("#5f6368", "#b0b4b9"),
}
# The primary action's button: (background, hover background, disabled background), on light and on dark.
_PRIMARY = {"light": ("#1a56c4", "#1748a3", "#b8c4d9"), "dark": ("#4c8bf5", "#6a9ef7", "#3d4654")}


def is_dark(palette: QPalette | None = None) -> bool:
    palette = palette or QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def status_colour(kind: str) -> str:
    light, dark = _STATUS[kind]
    return dark if is_dark() else light


def set_status_style(widget: QWidget, kind: str | None) -> None:
    """Colour a widget's text as a problem / warning / good / muted message (None: the normal text colour).

    The colour comes from the application style sheet (`status_style_sheet`), so it follows a scheme change.
    """
    widget.setProperty("status", kind or "")
    widget.style().unpolish(widget)
    widget.style().polish(widget)


def set_heading(label: QWidget, scale: float) -> None:
    """Make `label` a heading: bold, its font `scale` times the size it has."""
    font = label.font()
    font.setPointSizeF(font.pointSizeF() * scale)
    font.setBold(True)
    label.setFont(font)


def set_primary(button: QWidget) -> None:
    """Style `button` as the page's primary action (filled with the accent colour, bold; greyed when disabled)."""
    button.setProperty("role", "primary")
    button.style().unpolish(button)
    button.style().polish(button)


def set_attention(widget: QWidget, on: bool) -> None:
    """Outline `widget` in the accent colour (a control a problem points at), or take the outline away."""
    widget.setProperty("attention", on)
    widget.style().unpolish(widget)
    widget.style().polish(widget)
    widget.update()


def status_style_sheet() -> str:
    """The application style sheet: the status colours and the primary button, for the current scheme."""
    background, hover, disabled = _PRIMARY["dark" if is_dark() else "light"]
    primary = (f'QPushButton[role="primary"] {{ background: {background}; color: white; font-weight: bold; '
               f"border: none; border-radius: 4px; padding: 6px 18px; }}\n"
               f'QPushButton[role="primary"]:hover {{ background: {hover}; }}\n'
               f'QPushButton[role="primary"]:disabled {{ background: {disabled}; color: '
               f'{"#8a919c" if is_dark() else "#f4f6fa"}; }}')
    statuses = "\n".join(f'*[status="{kind}"] {{ color: {status_colour(kind)}; }}' for kind in _STATUS)
    attention = f'*[attention="true"] {{ border: 2px solid {background}; border-radius: 3px; }}'
    return statuses + "\n" + primary + "\n" + attention


def apply_scheme(name: str) -> None:
    """Follow the system ("system") or force "light" / "dark".

    The colour scheme is asked of the platform first; where it cannot switch (some Linux desktops, offscreen)
    a forced dark scheme falls back to our own dark palette, so both choices always take effect.
    """
    app = QApplication.instance()
    if not isinstance(app.style(), VisibleIndicators):
        # Once only, before any style sheet: replacing the style under a style sheet can make the next
        # setStyleSheet repolish widgets through the deleted style (a segfault, seen building a second window).
        app.setStyleSheet("")
        app.setStyle(VisibleIndicators("Fusion"))
    scheme = SCHEMES.get(name, Qt.ColorScheme.Unknown)
    app.styleHints().setColorScheme(scheme)
    palette = app.style().standardPalette()
    if scheme is Qt.ColorScheme.Dark and not is_dark(palette):
        palette = dark_palette()
    app.setPalette(palette)
    app.setStyleSheet(status_style_sheet())


@contextmanager
def style_sheet_held_back() -> Iterator[None]:
    """Build many widgets inside this: under an application style sheet Qt polishes each widget by the sheet as it
    is added to its parent (the main window took three times as long to build, 0.47 s of CPU instead of 0.16 s);
    on leaving, the sheet is set again and applied once to all the widgets. Raises what the body raises, with
    the sheet set again."""
    app = QApplication.instance()
    sheet = app.styleSheet()
    app.setStyleSheet("")
    try:
        yield
    finally:
        app.setStyleSheet(sheet)


class VisibleIndicators(QProxyStyle):
    """Fusion, with check boxes whose box can be seen on a dark background: Fusion outlines them in the window
    colour darkened, which on a dark window is the colour of the box itself (the ticks of an item list and the
    check boxes of the forms were invisible in dark mode)."""

    _BOXES = (QStyle.PrimitiveElement.PE_IndicatorCheckBox, QStyle.PrimitiveElement.PE_IndicatorItemViewItemCheck)

    def drawPrimitive(self, element, option, painter, widget=None) -> None:  # noqa: N802 - Qt's name
        super().drawPrimitive(element, option, painter, widget)
        if element in self._BOXES and is_dark(option.palette):
            painter.save()
            painter.setRenderHint(painter.RenderHint.Antialiasing, False)
            painter.setPen(QPen(option.palette.color(QPalette.ColorRole.PlaceholderText), 1))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(indicator_box(option.rect))
            painter.restore()


def indicator_box(rect: QRect) -> QRect:
    """The square a check box is drawn in, centred in the indicator's `rect`, a pixel in from its edges."""
    side = min(rect.width(), rect.height()) - 2
    return QRect(rect.x() + (rect.width() - side) // 2, rect.y() + (rect.height() - side) // 2, side - 1, side - 1)


def dark_palette() -> QPalette:
    palette = QPalette()
    role, group = QPalette.ColorRole, QPalette.ColorGroup
    colours = {
        role.Window: "#2b2d30", role.WindowText: "#e8eaed", role.Base: "#1f2023", role.AlternateBase: "#2a2b2e",
        role.ToolTipBase: "#3c3f43", role.ToolTipText: "#e8eaed", role.PlaceholderText: "#9aa0a6",
        role.Text: "#e8eaed", role.Button: "#3a3c40", role.ButtonText: "#e8eaed", role.BrightText: "#ffffff",
        role.Light: "#4a4d52", role.Midlight: "#3f4246", role.Mid: "#35373b", role.Dark: "#1a1b1e",
        role.Shadow: "#000000", role.Highlight: "#4c8bf5", role.HighlightedText: "#ffffff",
        role.Link: "#8ab4f8", role.LinkVisited: "#c58af9",
    }
    for colour_role, colour in colours.items():
        palette.setColor(colour_role, QColor(colour))
    for colour_role in (role.WindowText, role.Text, role.ButtonText):
        palette.setColor(group.Disabled, colour_role, QColor("#7f8388"))
    return palette
