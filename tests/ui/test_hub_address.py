"""The window names the Hub in use (HF_ENDPOINT: a mirror, a company Hub), never huggingface.co in its place."""

from __future__ import annotations


def test_the_token_field_points_to_the_hub_in_use(hub_env, window):
    address = hub_env.server.url.split("://", 1)[-1]
    placeholder = window.settings.token_edit.placeholderText()
    assert f"{address}/settings/tokens" in placeholder and "huggingface.co" not in placeholder
