"""Which Hub we talk to, where its cache is, and whether we are offline.

Everything is read from huggingface_hub's own settings (`HF_ENDPOINT`, `HF_HOME`/`HF_HUB_CACHE`) at call time,
so Mergesmith shares the cache and tokens with every other Hugging Face tool.

Offline mode is decided here, once: the environment (`HF_HUB_OFFLINE` or `TRANSFORMERS_OFFLINE`) sets it unless
Mergesmith's own choice (the window's "Work offline", the CLI's `--offline`) says otherwise, and every change is
written into huggingface_hub's own flag, which it reads at each request, so both always agree.
"""

from __future__ import annotations

import os
import socket
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from huggingface_hub import constants

from guiapp.errors import HubUnreachableError, OfflineError
from guiapp.facts.hub import hub_endpoint
from guiapp.facts.wording import say
from guiapp.hub.server_checks import check_hub_answers
from guiapp.system.scrub import scrub_log_records

if TYPE_CHECKING:
    from huggingface_hub import HfApi

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # huggingface_hub's, in its order
_offline_chosen: bool | None = None  # Mergesmith's own choice; None follows the environment
# How long an interactive call waits for the Hub's address (or the proxy's) to accept a connection, name lookup
# included, before it says the Hub cannot be reached: far above a working network's, far below a user's patience.
REACH_TIMEOUT_SECONDS = 2.5


@dataclass(frozen=True)
class OfflineState:
    """Whether Mergesmith is offline, and who decided: `variable` is the environment variable that asks for
    offline mode (None when none does); `chosen` is Mergesmith's own choice (None: the environment decides)."""

    offline: bool
    variable: str | None
    chosen: bool | None

    @property
    def words(self) -> str:
        """Where the state comes from, in words: "Offline: set by HF_HUB_OFFLINE in the environment"."""
        if self.chosen is None:
            return f"Offline: set by {self.variable} in the environment." if self.offline else "Online."
        if self.variable and not self.offline:
            return f"Online: chosen here, which overrides {self.variable} in the environment for Mergesmith."
        return "Offline: chosen here." if self.offline else "Online."


def environment_offline_variable() -> str | None:
    """The environment variable asking for offline mode (read as huggingface_hub reads it), or None."""
    for variable in OFFLINE_VARIABLES:
        if os.environ.get(variable, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return variable
    return None


def offline_state() -> OfflineState:
    """The offline mode in force and where it comes from (Mergesmith's choice first, then the environment)."""
    variable = environment_offline_variable()
    offline = _offline_chosen if _offline_chosen is not None else variable is not None
    return OfflineState(offline, variable, _offline_chosen)


def set_offline(enabled: bool | None) -> None:
    """Make Mergesmith offline (True) or online (False) whatever the environment says, or follow the environment
    (None); huggingface_hub's own flag follows, so its downloads and requests obey the same choice."""
    global _offline_chosen
    _offline_chosen = enabled
    constants.HF_HUB_OFFLINE = offline_state().offline


def is_offline() -> bool:
    """True when online features must not touch the network."""
    return offline_state().offline


def require_online(action: str) -> None:
    """Raise OfflineError saying that `action` (e.g. "Searching the Hub") needs the network."""
    state = offline_state()
    if state.offline:
        cli = f"unset {state.variable}" if state.variable else "leave out --offline"
        raise OfflineError(
            f"{action} needs the Hugging Face Hub, and Mergesmith is working offline.",
            hint=say("Go online to use the Hub: untick Work offline in Settings{aside:the CLI's way: {cli_way}}. "
                     "Local folders and models already downloaded keep working offline.", cli_way=cli),
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
        return cls(endpoint=hub_endpoint(), cache_dir=Path(constants.HF_HUB_CACHE))

    def api(self) -> HfApi:
        """A client for this endpoint; it uses the token huggingface_hub knows (HF_TOKEN or the stored one)."""
        from huggingface_hub import HfApi  # keeps `import guiapp.hub.*` light

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

    def check_reachable(self, timeout: float = REACH_TIMEOUT_SECONDS) -> None:
        """One connection attempt to the endpoint (or to the proxy that the environment names for it).

        Interactive calls make it first because huggingface_hub retries a failed listing with back-off for
        about 25 s. Raises HubUnreachableError, in words and offering offline mode, when no connection is made
        within `timeout` seconds; a Hub that accepts the connection but answers badly is left to the call.
        """
        host, port = _first_hop(self.endpoint)
        outcome: list[BaseException | None] = []

        def attempt() -> None:
            try:
                socket.create_connection((host, port), timeout=timeout).close()
                outcome.append(None)
            except OSError as error:
                outcome.append(error)

        # A thread, so that a name lookup (which ignores socket timeouts) is bounded too.
        worker = threading.Thread(target=attempt, name="hub-reachable", daemon=True)
        worker.start()
        worker.join(timeout)
        if outcome and outcome[0] is None:
            return
        raise HubUnreachableError(
            f"Can't reach the Hugging Face Hub at {self.shown_endpoint}: {_why_unreachable(outcome, timeout)}.",
            hint="Check your connection (and any proxy), or switch to offline mode: the models already downloaded "
            "and your local folders keep working.",
        )


def _why_unreachable(outcome: list[BaseException | None], timeout: float) -> str:
    error = outcome[0] if outcome else None
    if error is None or isinstance(error, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(error, socket.gaierror):
        return "its address cannot be looked up (no network, or no name server)"
    if isinstance(error, ConnectionRefusedError):
        return "nothing answers at that address"
    return f"the connection failed ({error})"


def _first_hop(endpoint: str) -> tuple[str, int]:
    """The host and port a request to `endpoint` connects to first: the proxy set for it, else the endpoint."""
    url = urlsplit(endpoint)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(url.hostname or ""):
        url = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
