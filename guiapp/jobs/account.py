"""The user's Hub account and connection as the window shows them: who is signed in, signing in and out, working
offline, and the model cache in use. The token stays where huggingface_hub keeps it (see guiapp.hub.tokens).

The Hub modules are imported inside each function so that building the window loads no Hub client."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Account:
    """The account line of the Settings page: `words` say who is signed in (or that nobody is), `can_sign_out`
    whether Sign out can remove the token (not one set in the environment, which is not Mergesmith's to remove)."""

    words: str
    can_sign_out: bool


def current_account() -> Account:
    """Who the active token belongs to, asking the Hub. Raises what `signed_in_user` raises (InvalidTokenError for
    a rejected token, OfflineError when offline, HubUnreachableError); a token is there then, so signing out
    stays possible."""
    from guiapp.hub.tokens import signed_in_user, token_source

    source = token_source()
    if source is None:
        return Account("Not signed in. Public models work without an account.", False)
    user = signed_in_user()
    if source == "HF_TOKEN":  # the environment's token: signing out cannot remove it
        return Account(f"Signed in as {user} (set in this computer's environment)", False)
    return Account(f"Signed in as {user}", True)


def sign_in(token: str) -> str:
    """Check `token` with the Hub, keep it as huggingface_hub's active token and return the user name. Raises
    InvalidTokenError when the Hub rejects it, OfflineError when offline; nothing is kept then."""
    from guiapp.hub.tokens import sign_in as keep_token

    return keep_token(token)


def sign_out() -> None:
    """Remove the stored token; one set in the environment (HF_TOKEN) stays active. Raises OSError when the
    token file cannot be removed."""
    from guiapp.hub.tokens import sign_out as forget_token

    forget_token()


@dataclass(frozen=True)
class Offline:
    """Whether Mergesmith works offline now, and `words` saying who decided."""

    offline: bool
    words: str


def offline_status() -> Offline:
    """The offline mode in force and where it comes from (Mergesmith's choice first, then the environment).
    Never raises."""
    from guiapp.hub.connection import offline_state

    state = offline_state()
    return Offline(state.offline, state.words)


def choose_offline(chosen: bool | None) -> None:
    """Work offline (True) or online (False) whatever the environment says, or follow the environment (None).
    Never raises."""
    from guiapp.hub.connection import set_offline

    set_offline(chosen)


def environment_asks_offline() -> bool:
    """Whether the environment (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE) asks for offline mode. Never raises."""
    from guiapp.hub.connection import environment_offline_variable

    return environment_offline_variable() is not None


def model_cache_folder() -> Path:
    """The Hub model cache in use (HF_HUB_CACHE, shared with the other Hugging Face tools). Never raises."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)
