"""Help's pages open inside the app, with no external viewer: Getting started (for someone new to merging) and
the recipe format."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QTextBrowser

from docs.recipes_reference import DOCUMENT


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`): these tests open Help's pages, which it closes again."""
    return shared_window


def _help_action(window, text: str):
    help_menu = next(action.menu() for action in window.menuBar().actions() if action.text() == "&Help")
    return next(action for action in help_menu.actions() if action.text() == text)


@pytest.mark.parametrize(("entry", "heading", "phrase"), [
    ("&Getting started", "Getting started", "Try it with sample models"),
    ("&Recipe format", "The recipe format", "merge_method: ties"),
])
def test_a_help_page_opens_in_the_app_rendered(qtbot, window, entry, heading, phrase):
    _help_action(window, entry).trigger()
    viewer = window._help_viewers[{"&Getting started": "getting-started.md"}.get(entry, "recipes.md")]
    qtbot.waitUntil(viewer.isVisible, timeout=5_000)
    text = viewer.findChild(QTextBrowser).toPlainText()
    assert text.startswith(heading) and phrase in text
    assert "# " not in text.splitlines()[0]  # rendered, not the Markdown source
    _help_action(window, entry).trigger()  # again: the same window comes to the front
    assert len([w for w in window._help_viewers.values() if w.isVisible()]) == 1


def test_the_recipe_format_page_is_the_documents_own_text(window):
    _help_action(window, "&Recipe format").trigger()
    text = window._help_viewers["recipes.md"].findChild(QTextBrowser).toMarkdown()
    assert "merge_method" in text and DOCUMENT.read_text().count("merge_method") > 3
