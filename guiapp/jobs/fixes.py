"""What the window offers to fix a failed job: buttons that do the fix, in the window's own words.

An `Explanation` (`guiapp.system.explain`) says what to do in words that also serve the command line (flags,
`hf auth login`, environment variables). The window turns it into `FixAction`s (Retry, Retry with a new name,
Replace <folder>, Choose another folder…, Sign in…, Open the model's page, Use offline mode) from ONE table,
`ACTIONS_OF_KIND`; its text has the window's own words already (`guiapp.facts.wording`). Nothing here imports
Qt: the table is tested without a window.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guiapp.errors import Remedy
from guiapp.jobs.remedies import saved_remedy
from guiapp.jobs.runner import JobStatus

# What the window does for each action (the explanation panel connects them):
RETRY = "retry"  # the same job again
RETRY_WITH = "retry_with"  # the job with the explanation's suggested settings
REPLACE = "replace"  # the job again, replacing the existing output (deletes it once the new one is complete)
CHOOSE_FOLDER = "choose_folder"  # pick another output folder, then run again
SIGN_IN = "sign_in"  # the Settings page's access token field
OPEN_MODEL_PAGE = "open_model_page"  # the model's page on the Hub (accept a licence there)
USE_OFFLINE = "use_offline"  # switch offline mode on
GO_ONLINE = "go_online"  # switch offline mode off

# The actions each kind of failure offers besides retrying (an Explanation's `kind`: a catalogue key or the class
# name of a Mergesmith error). The one place that decides which buttons a failure gets.
ACTIONS_OF_KIND: dict[str, tuple[str, ...]] = {
    "gated_repo": (OPEN_MODEL_PAGE, SIGN_IN),
    "GatedModelError": (OPEN_MODEL_PAGE, SIGN_IN),
    "invalid_token": (SIGN_IN,),
    "InvalidTokenError": (SIGN_IN,),
    "forbidden": (SIGN_IN,),
    "repository_not_found": (SIGN_IN,),
    "ModelNotFoundError": (SIGN_IN,),
    "rate_limited": (SIGN_IN,),
    "RateLimitedError": (SIGN_IN,),
    "connection": (USE_OFFLINE,),
    "ConnectionLostError": (USE_OFFLINE,),
    "HubUnreachableError": (USE_OFFLINE,),
    "offline_mode": (GO_ONLINE,),
    "OfflineError": (GO_ONLINE,),
    "local_entry_not_found": (GO_ONLINE,),
    "OutputError": (CHOOSE_FOLDER,),
    "disk_full": (CHOOSE_FOLDER,),
    "permission_denied": (CHOOSE_FOLDER,),
    "InsufficientResourcesError": (CHOOSE_FOLDER,),
}
_LABELS = {CHOOSE_FOLDER: "Choose another folder…", SIGN_IN: "Sign in…", OPEN_MODEL_PAGE: "Open the model's page",
           USE_OFFLINE: "Use offline mode", GO_ONLINE: "Go online"}
_TOOLTIPS = {
    CHOOSE_FOLDER: "Pick another output folder; the job runs again there.",
    SIGN_IN: "Opens Settings at the access token field.",
    OPEN_MODEL_PAGE: "Opens the model's page on the Hub in your browser, where its licence is accepted.",
    USE_OFFLINE: "Work with downloaded models and local folders only; nothing is asked of the Hub.",
    GO_ONLINE: "Turn offline mode off so models can be read from the Hub.",
}
_URL = re.compile(r"https?://[^\s,;)]+[^\s,;).]")


@dataclass(frozen=True)
class FixAction:
    """One button: `action` (what it does, one of the names above), its `label` and `tooltip`, and for the
    retrying actions the job-spec `changes` to run with (empty for a plain retry); `url` for the model's page."""

    action: str
    label: str
    tooltip: str = ""
    changes: dict[str, Any] = field(default_factory=dict)
    url: str = ""


def fix_actions(explanation: Mapping[str, Any] | None, status: str = JobStatus.FAILED,
                output: str | None = None) -> list[FixAction]:
    """The buttons for a job that ended with `status` and `explanation` (an Explanation's dict; None for a cancelled
    job), whose output folder is `output`: the remedy first, then the kind's actions, the explicit replacing, and a
    plain Retry. Never raises: an output folder that cannot be read is described as such."""
    explanation = explanation or {}
    actions: list[FixAction] = []
    remedy = offered_remedy(explanation, output)
    if remedy is not None:
        actions.append(FixAction(RETRY_WITH, f"Retry {remedy.label}", "Runs the job again with these settings changed.",
                                 remedy.changes))
    for action in ACTIONS_OF_KIND.get(str(explanation.get("kind") or ""), ()):
        url = model_page_url(explanation) if action == OPEN_MODEL_PAGE else ""
        if action != OPEN_MODEL_PAGE or url:
            actions.append(FixAction(action, _LABELS[action], _TOOLTIPS[action], url=url))
    replacement = saved_remedy(explanation, "replace_with")
    if replacement is not None and output:
        folder = Path(output)
        actions.append(FixAction(REPLACE, f"Replace {folder.name}…",
                                 f"Deletes {folder} ({describe_output(folder)}) once the new output is complete. "
                                 "You are asked to confirm first.", replacement.changes))
    if status and JobStatus(status).retryable:  # "": no job
        actions.append(FixAction(RETRY, "Retry", "Runs the same job again, unchanged."))
    return actions


def offered_remedy(explanation: Mapping[str, Any], output: str | None = None) -> Remedy | None:
    """The remedy a saved explanation offers for a job writing `output`, as it can run now: a suggested output
    folder taken since it was suggested (by another job, or before a restart) is replaced by the next free name
    beside it."""
    from guiapp.checkpoints.output_guard import free_destination, new_folder_remedy  # no torch

    remedy = saved_remedy(explanation)
    if remedy is None or remedy.setting != "output" or not remedy.value or not os.path.lexists(str(remedy.value)):
        return remedy
    folder = free_destination(str(remedy.value))
    elsewhere = bool(output) and os.path.realpath(folder.parent) != os.path.realpath(Path(str(output)).parent)
    return new_folder_remedy(folder, beside_models=elsewhere)


def describe_output(folder: Path) -> str:
    """What replacing `folder` would delete, in words ("an earlier Mergesmith merge output from … (3 files, 1 GB)")."""
    from guiapp.checkpoints.output_guard import describe_folder, read_marker  # no torch

    try:
        previous = read_marker(folder)
        return previous.describe() if previous is not None else describe_folder(folder)
    except OSError as error:
        return f"it cannot be read: {error.strerror or error}"


def model_page_url(explanation: Mapping[str, Any]) -> str:
    """The model's page the explanation names (the first web address in what to do, or in what happened), or ""."""
    for part in ("fix", "what"):
        found = _URL.search(str(explanation.get(part) or ""))
        if found:
            return found.group()
    return ""

