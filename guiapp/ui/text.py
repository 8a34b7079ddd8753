"""Turning errors and text into what a label shows."""

from __future__ import annotations

from guiapp.facts.wording import for_window, join


def error_text(error: BaseException) -> str:
    """A Mergesmith error's message and hint ("what happened. What to do."), or a foreign error's text, in the
    window's words (no command-line flag or environment variable to change)."""
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return for_window(join(message, getattr(error, "hint", None)))


def html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\n", "<br>")


def sentence(text: str) -> str:
    """`text` with its first letter capitalised and the rest untouched ("fits in RAM" → "Fits in RAM")."""
    return text[:1].upper() + text[1:]
