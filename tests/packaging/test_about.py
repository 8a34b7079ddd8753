"""Help ▸ About shows this build's version, the torch it computes with, the licence and working links."""

from __future__ import annotations

import torch
from PySide6.QtWidgets import QLabel

from guiapp import __version__
from guiapp.ui.about import AboutDialog


def test_about_names_version_torch_and_licence(qtbot):
    dialog = AboutDialog()
    qtbot.addWidget(dialog)
    text = "\n".join(label.text() for label in dialog.findChildren(QLabel))
    assert f"Mergesmith {__version__}" in text
    assert f"torch {torch.__version__}" in text
    assert "Apache-2.0" in text
    links = [label for label in dialog.findChildren(QLabel) if "href=" in label.text()]
    assert links and all(label.openExternalLinks() for label in links)
    assert not dialog.findChildren(QLabel)[0].pixmap().isNull(), "the icon is missing"


def test_copy_details_puts_the_facts_on_the_clipboard(qtbot, qapp):
    dialog = AboutDialog()
    qtbot.addWidget(dialog)
    dialog.copy_details()
    copied = qapp.clipboard().text()
    assert copied.startswith(f"Mergesmith {__version__}\ntorch {torch.__version__}")
