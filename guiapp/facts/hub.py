"""Which Hugging Face Hub is in use, read without importing huggingface_hub."""

from __future__ import annotations

import os
import sys

PUBLIC_HUB = "https://huggingface.co"


def hub_endpoint() -> str:
    """The Hub huggingface_hub talks to (HF_ENDPOINT: a mirror, a test Hub; else the public Hub), without a
    trailing slash. huggingface_hub's own setting wins once it is loaded, so a changed one is followed; before
    that, the environment says what it will read. Never raises."""
    constants = sys.modules.get("huggingface_hub.constants")
    endpoint = getattr(constants, "ENDPOINT", None) or os.environ.get("HF_ENDPOINT") or PUBLIC_HUB
    return endpoint.rstrip("/")
