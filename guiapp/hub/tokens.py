"""Hub access tokens, kept where huggingface_hub keeps them (HF_TOKEN, or its token file in HF_HOME).

Mergesmith never stores a token in its own settings and never logs one; signing in and out goes through
huggingface_hub's `login` / `logout`, so `hf auth login` and Mergesmith see the same token.
"""

from __future__ import annotations

import os

from guiapp.hub.connection import HubConnection, require_online
from guiapp.hub.failures import hub_errors


def token_source() -> str | None:
    """Where the active token comes from: "HF_TOKEN" (environment), "stored" (huggingface_hub's token file) or None."""
    from huggingface_hub import get_token

    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return "HF_TOKEN"
    return "stored" if get_token() else None


def sign_in(token: str) -> str:
    """Check `token` with the Hub, store it as huggingface_hub's active token, and return the user name.

    Raises InvalidTokenError when the Hub rejects it and OfflineError when offline; nothing is stored then.
    """
    from huggingface_hub import login

    require_online("Signing in to the Hub")
    token = token.strip()
    with hub_errors():
        user = HubConnection.current().api().whoami(token=token)["name"]
        login(token=token, add_to_git_credential=False)
    return user


def sign_out() -> None:
    """Remove the stored token(s). A token in HF_TOKEN stays active: it is the environment's, not ours."""
    from huggingface_hub import logout

    logout()


def signed_in_user() -> str | None:
    """The user name of the active token, or None without a token. Raises InvalidTokenError, OfflineError."""
    from huggingface_hub import get_token

    token = get_token()
    if token is None:
        return None
    require_online("Checking the Hub token")
    with hub_errors():
        return HubConnection.current().api().whoami(token=token)["name"]
