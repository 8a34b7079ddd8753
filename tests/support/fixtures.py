"""Pytest fixtures around the test Hub. Use them from a conftest.py with
`from tests.support.fixtures import hub_server, hub_env  # noqa: F401`.

`hub_env` points huggingface_hub (in this process, and in subprocesses started with `hub_env.env`) at the test
server, with a temporary HF_HOME (cache, token) and a temporary Mergesmith config folder, and no token: nothing
a test does reaches ~/.cache, ~/.config or the real Hub.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from huggingface_hub import constants, hf_api

from tests.support.hub_server import HubServer


@dataclass(frozen=True)
class HubEnvironment:
    server: HubServer
    home: Path
    cache_dir: Path
    config_dir: Path

    @property
    def env(self) -> dict[str, str]:
        """os.environ for a subprocess (e.g. the `mergesmith` CLI) that must use the test Hub and folders."""
        return dict(os.environ)


@pytest.fixture
def hub_server() -> Iterator[HubServer]:
    """A running, empty test Hub; add models with `hub_server.add_model(repo_id, folder)`."""
    with HubServer() as server:
        yield server


@pytest.fixture
def hub_env(hub_server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubEnvironment]:
    """Route huggingface_hub to `hub_server`, with a temporary HF_HOME and config folder and no token."""
    from guiapp.hub import connection  # noqa: PLC0415 - only needed once the fixture runs

    home = tmp_path / "hf_home"
    cache = home / "hub"
    config = tmp_path / "config"
    cache.mkdir(parents=True)
    for variable in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(variable, raising=False)
    # For subprocesses: huggingface_hub reads these when it is imported.
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_UPDATE_CHECK", "1")
    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(config))
    # For this process: huggingface_hub already read its environment at import, so set its constants directly
    # (its own test suite does the same). The URL template must move with the endpoint.
    monkeypatch.setattr(constants, "ENDPOINT", hub_server.url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub_server.url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    # huggingface_hub's module-level functions (login() checks the token with one) use a client made at import.
    monkeypatch.setattr(hf_api.api, "endpoint", hub_server.url)
    connection.set_offline(None)
    yield HubEnvironment(server=hub_server, home=home, cache_dir=cache, config_dir=config)
    connection.set_offline(None)
