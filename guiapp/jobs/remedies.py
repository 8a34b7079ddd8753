"""How a remedy (`guiapp.errors.Remedy`: a setting, its new value, the button's words) is offered where the
failure is shown: the CLI prints it as the flag of the command that ran, the window as a Retry button
(`guiapp.jobs.fixes`). `REMEDY_SETTINGS` is the one table that says what each setting is called on the command
line; a remedy of a setting without a flag (a merge recipe's out_dtype, force_download) is offered in the window
only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from guiapp.errors import Remedy


@dataclass(frozen=True)
class CommandLineSetting:
    """A job setting as a command's option: `dest` (argparse's name for it, present only on the commands that
    have the option) and `flag` (with "{value}" where the value goes; a switch stands alone)."""

    dest: str
    flag: str


REMEDY_SETTINGS: dict[str, CommandLineSetting] = {
    "output": CommandLineSetting("out", "--out {value}"),  # extract-lora, apply-lora (a merge's folder: argument)
    "overwrite": CommandLineSetting("overwrite", "--overwrite"),
    "force": CommandLineSetting("force", "--force"),
    "device": CommandLineSetting("device", "--device {value}"),
    "dtype": CommandLineSetting("dtype", "--dtype {value}"),
    "compute_dtype": CommandLineSetting("compute_dtype", "--compute-dtype {value}"),
    "long_prompt": CommandLineSetting("long_prompt", "--long-prompt {value}"),
}


def as_flag(remedy: Remedy, has_option: Callable[[str], bool]) -> str | None:
    """"Retry with: --device cpu" when the command that ran has the remedy's option (`has_option(dest)`), else
    None: the command cannot take that change."""
    setting = REMEDY_SETTINGS.get(remedy.setting)
    if setting is None or not has_option(setting.dest) or remedy.value is False:
        return None
    return f"Retry with: {setting.flag.format(value=remedy.value)}"


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
