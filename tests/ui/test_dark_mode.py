"""Dark mode keeps every control visible: an unticked check box (in a form, or beside an item of a list such as the
LoRA page's module kinds) shows its box, not only its tick."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QListWidget, QListWidgetItem

from guiapp.ui.theme import apply_scheme


def _visible_pixels_left_of_text(widget, width: int = 22) -> int:
    """Pixels, in the strip where the box is drawn, clearly lighter than the dark background."""
    image = widget.grab().toImage()
    background = image.pixelColor(image.width() - 2, image.height() // 2).lightness()
    return sum(1 for x in range(min(width, image.width())) for y in range(image.height())
               if image.pixelColor(x, y).lightness() > background + 60)


@pytest.fixture
def dark(qapp):
    apply_scheme("dark")
    yield
    apply_scheme("light")


def test_an_unticked_item_shows_its_box_in_dark_mode(qtbot, dark):
    listing = QListWidget()
    qtbot.addWidget(listing)
    item = QListWidgetItem("q_proj  (2 matrices)")
    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
    item.setCheckState(Qt.CheckState.Unchecked)
    listing.addItem(item)
    listing.resize(300, 40)
    listing.show()
    assert _visible_pixels_left_of_text(listing.viewport()) >= 20  # the box's four sides (none before)


def test_an_unticked_check_box_shows_its_box_in_dark_mode(qtbot, dark):
    box = QCheckBox("Replace the folder if it already exists")
    qtbot.addWidget(box)
    box.show()
    assert _visible_pixels_left_of_text(box) >= 40  # the box (18 before: the tick area only)


def test_a_desktop_scheme_change_applies_the_scheme_once_however_often_the_settings_were_applied(qapp, monkeypatch):
    from PySide6.QtWidgets import QApplication

    from guiapp.ui.pages import settings

    applied = []
    monkeypatch.setattr(settings, "apply_scheme", applied.append)
    settings.apply_saved_settings()
    settings.apply_saved_settings()  # as every window a process builds does
    applied.clear()
    QApplication.instance().styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert applied == ["system"]  # each apply restyles every widget: once is the follow, more is waste
