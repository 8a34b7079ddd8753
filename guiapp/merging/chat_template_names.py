"""The chat templates Mergesmith ships, by name (the texts mergekit ships under these names). Torch-free, so that
the window can offer them without loading the engine."""

from __future__ import annotations

from pathlib import Path

TEMPLATE_FOLDER = Path(__file__).with_name("chat_templates")
BUILT_IN_CHAT_TEMPLATES = tuple(sorted(path.stem for path in TEMPLATE_FOLDER.glob("*.jinja")))
