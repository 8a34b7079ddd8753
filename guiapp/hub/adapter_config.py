"""The one reader of PEFT adapter configurations (adapter_config.json): bounded, and every field it gives checked.

apply-lora, try, perplexity, a merge's `model+adapter` references and the library all read adapters through
`read_adapter_config`, so a value that is not what PEFT writes (a rank of 0 or "abc", an alpha that is not a
number, a pattern that is not text) is refused here, naming the field and the file, instead of failing deep
inside the code that uses it. Patterns (`target_modules` as one regex, the keys of `rank_pattern` and
`alpha_pattern`) are compiled as `BoundedPattern`s, so matching them is bounded in time.

Nothing here imports torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guiapp.errors import CheckpointError
from guiapp.system.bounded import BoundedPattern, describe_value, load_json_limited

ADAPTER_CONFIG = "adapter_config.json"
# An adapter_config.json is a few kilobytes; a far larger one is not an adapter's configuration.
ADAPTER_CONFIG_BYTES = 1_000_000
# PEFT's own default rank when a configuration names none.
DEFAULT_RANK = 8
# `modules_to_save` entries are module names; PEFT matches them as regexes, so only name characters are allowed.
_MODULE_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_RESTORE = "Restore the adapter's original adapter_config.json (as PEFT saved it), or download the adapter again."

Patterns = tuple[tuple[BoundedPattern, float], ...]


@dataclass(frozen=True)
class AdapterConfig:
    """An adapter's checked configuration. `document` is the whole JSON object, for the fields not checked here."""

    path: Path
    document: dict[str, Any]
    peft_type: str
    r: int
    lora_alpha: float
    target_modules: BoundedPattern | tuple[str, ...] | None
    rank_pattern: Patterns
    alpha_pattern: Patterns
    modules_to_save: tuple[str, ...]
    base_model: str | None

    def rank_for(self, module: str) -> int:
        """The rank PEFT gives `module`: the first `rank_pattern` key matching it as a name suffix, else `r`.
        Raises CheckpointError when a key takes longer than the time bound to match."""
        return int(_pattern_value(self.rank_pattern, module, self.r))

    def alpha_for(self, module: str) -> float:
        """The alpha PEFT gives `module` (`alpha_pattern`, else `lora_alpha`); errors as `rank_for`."""
        return _pattern_value(self.alpha_pattern, module, self.lora_alpha)

    def flag(self, name: str) -> bool:
        """A true/false field (use_rslora, fan_in_fan_out, use_dora…); absent or null is false.
        Raises CheckpointError when it holds anything but true, false or null."""
        value = self.document.get(name)
        if value is None or isinstance(value, bool):
            return bool(value)
        raise _field_error(self.path, name, value, "true or false")


def read_adapter_config(folder: Path | str) -> AdapterConfig:
    """The checked configuration of the adapter in `folder`.

    Raises CheckpointError, naming the file and the field, when the file is missing (saying when the folder holds
    a full model instead), too large, not a JSON object, or when `r` is not a whole number above 0, `lora_alpha`
    not a finite number, `target_modules` not a pattern or a list of names, `rank_pattern`/`alpha_pattern` not a
    mapping of patterns to numbers above 0, `modules_to_save` not a list of module names, or a pattern too long
    or invalid.
    """
    folder = Path(folder)
    path = folder / ADAPTER_CONFIG
    if not path.is_file():
        full_model = " (it holds a full model)" if (folder / "config.json").is_file() else ""
        raise CheckpointError(
            f"{folder} has no {ADAPTER_CONFIG}, so it is not a PEFT adapter folder{full_model}.",
            hint="Choose the folder that holds adapter_config.json and adapter_model.safetensors.",
        )
    document = load_json_limited(path, ADAPTER_CONFIG_BYTES, CheckpointError, what="adapter configuration",
                                 hint=_RESTORE)
    if not isinstance(document, dict):
        raise CheckpointError(f"{path} does not hold a JSON object, so it is not an adapter configuration.",
                              hint=_RESTORE)
    r = _rank(path, "r", document.get("r", DEFAULT_RANK))
    alpha = document.get("lora_alpha", r)
    if not _is_number(alpha) or not math.isfinite(alpha):
        raise _field_error(path, "lora_alpha", alpha, "a number (PEFT writes, say, 16)")
    base = document.get("base_model_name_or_path")
    kind = document.get("peft_type")
    return AdapterConfig(
        path=path,
        document=document,
        peft_type=kind.upper() if isinstance(kind, str) else "",
        r=r,
        lora_alpha=float(alpha),
        target_modules=_target_modules(path, document.get("target_modules")),
        rank_pattern=_patterns(path, "rank_pattern", document.get("rank_pattern"), whole=True),
        alpha_pattern=_patterns(path, "alpha_pattern", document.get("alpha_pattern"), whole=False),
        modules_to_save=_module_names(path, "modules_to_save", document.get("modules_to_save")),
        base_model=base if isinstance(base, str) and base.strip() else None,
    )


def _rank(path: Path, field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _field_error(path, field, value, "a whole number of at least 1 (PEFT writes, say, 8 or 16)")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _target_modules(path: Path, value: Any) -> BoundedPattern | tuple[str, ...] | None:
    """A string is one regex PEFT matches whole against each module name; a list holds name suffixes."""
    if value is None:
        return None
    if isinstance(value, str):
        return BoundedPattern(value, f"target_modules in {path}", CheckpointError)
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        return tuple(value)
    raise _field_error(path, "target_modules", value, "a pattern (text) or a list of module names")


def _patterns(path: Path, field: str, value: Any, *, whole: bool) -> Patterns:
    """`rank_pattern` (whole numbers) or `alpha_pattern` (numbers) as bounded regexes matching a module name's
    suffix, as PEFT matches them, each with its value."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise _field_error(path, field, value, "a mapping of module-name patterns to numbers")
    compiled = []
    for key, number in value.items():
        if whole:
            number = _rank(path, f"{field} entry {describe_value(key)}", number)
        elif not _is_number(number) or not (math.isfinite(number) and number > 0):
            raise _field_error(path, f"{field} entry {describe_value(key)}", number, "a number above 0")
        pattern = BoundedPattern(rf"(.*\.)?({key})$", f"{field} key {describe_value(key)} in {path}", CheckpointError)
        compiled.append((pattern, float(number)))
    return tuple(compiled)


def _module_names(path: Path, field: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(name, str) and _MODULE_NAME.fullmatch(name) for name in value):
        return tuple(value)
    raise _field_error(path, field, value, "a list of module names (such as \"lm_head\")")


def _pattern_value(patterns: Patterns, module: str, default: float) -> float:
    for pattern, value in patterns:
        if pattern.match(module):
            return value
    return default


def _field_error(path: Path, field: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(
        f"{field} in {path} must be {expected}, not {describe_value(value)}.",
        why="PEFT writes adapter_config.json when it saves an adapter; this value is not one it writes, so the "
        "file was edited or damaged, and the adapter cannot be used as it is.",
        hint=_RESTORE,
    )
