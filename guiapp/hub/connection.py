"""Which Hub we talk to, where its cache is, and whether we are offline.

Everything is read from huggingface_hub's own settings (`HF_ENDPOINT`, `HF_HOME`/`HF_HUB_CACHE`,
`HF_HUB_OFFLINE`) at call time, so Mergesmith shares the cache and tokens with every other Hugging Face tool.
On top of `HF_HUB_OFFLINE`, the window's "Work offline" switch (or the CLI's `--offline`) sets our own flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from huggingface_hub import constants

from guiapp.errors import OfflineError
from guiapp.hub.server_checks import check_hub_answers
from guiapp.system.scrub import scrub_log_records

if TYPE_CHECKING:
    from huggingface_hub import HfApi

_offline_requested = False


def set_offline(enabled: bool) -> None:
    """Switch Mergesmith's own offline mode on or off (HF_HUB_OFFLINE, when set, keeps it on regardless)."""
    global _offline_requested
    _offline_requested = enabled


def is_offline() -> bool:
    """True when online features must not touch the network."""
    return _offline_requested or bool(constants.HF_HUB_OFFLINE)


def require_online(action: str) -> None:
    """Raise OfflineError saying that `action` (e.g. "Searching the Hub") needs the network."""
    if is_offline():
        raise OfflineError(
            f"{action} needs the Hugging Face Hub, and Mergesmith is working offline.",
            hint="Turn off offline mode (and unset HF_HUB_OFFLINE) to use the Hub. "
            "Local folders and models already downloaded keep working offline.",
        )


@dataclass(frozen=True)
class HubConnection:
    """The Hub endpoint and the local cache folder every hub function uses."""

    endpoint: str
    cache_dir: Path

    @classmethod
    def current(cls) -> HubConnection:
        """huggingface_hub's endpoint and cache folder as configured now; from here on, every answer from the
        Hub is checked (see guiapp.hub.server_checks) before huggingface_hub uses it."""
        check_hub_answers()
        scrub_log_records()  # huggingface_hub's log lines quote URLs (HF_ENDPOINT's password) and server answers
        return cls(endpoint=constants.ENDPOINT.rstrip("/"), cache_dir=Path(constants.HF_HUB_CACHE))

    def api(self) -> HfApi:
        """A client for this endpoint; it uses the token huggingface_hub knows (HF_TOKEN or the stored one)."""
        from huggingface_hub import HfApi  # noqa: PLC0415 - keeps `import guiapp.hub.*` light

        return HfApi(endpoint=self.endpoint)

    @property
    def shown_endpoint(self) -> str:
        """The endpoint as messages and pages show it: without a user:password the URL may carry."""
        scheme, separator, rest = self.endpoint.partition("://")
        host, slash, path = rest.partition("/")
        return f"{scheme}{separator}{host.rpartition('@')[2]}{slash}{path}"

    def model_page(self, repo_id: str) -> str:
        """The web page of a model (where its licence is accepted)."""
        return f"{self.shown_endpoint}/{repo_id}"
