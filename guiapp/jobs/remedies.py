"""How a remedy (`guiapp.errors.Remedy`: a setting, its new value, the button's words) is offered where the
failure is shown: the CLI prints it as the flag of the command that ran, the window as a Retry button
(`guiapp.jobs.fixes`). What each setting is called on the command line is said once, in
`guiapp.facts.wording.SETTINGS` (the table every text's command-line words come from); a remedy of a setting
without a command-line option there (a merge recipe's out_dtype, force_download) is offered in the window only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from guiapp.errors import Remedy
from guiapp.facts.wording import SETTINGS


def as_flag(remedy: Remedy, has_option: Callable[[str], bool]) -> str | None:
    """"Retry with: --device cpu" when the command that ran has the remedy's option (`has_option(dest)`), else
    None: the command cannot take that change."""
    setting = SETTINGS.get(remedy.setting)
    if setting is None or not setting.dest or not has_option(setting.dest) or remedy.value is False:
        return None
    return f"Retry with: {setting.for_cli(None if remedy.value is True else remedy.value)}"


def saved_remedy(explanation: Mapping[str, Any], key: str = "remedy") -> Remedy | None:
    """The remedy an explanation saved in the job history holds under `key` ("remedy" or "replace_with"), or
    None. An earlier version saved a dict of changes ("retry_with", and "replace_with" as {"overwrite": true}): its
    one setting is read, worded generally since that version kept no words."""
    saved = explanation.get(key)
    if key == "remedy" and saved is None:
        saved = explanation.get("retry_with")
    if not isinstance(saved, Mapping) or not saved:
        return None
    if "setting" in saved and "label" in saved:
        return Remedy(str(saved["setting"]), saved.get("value"), str(saved["label"]))
    setting, value = next(iter(saved.items()))
    return Remedy(str(setting), value, "with the suggested settings")
