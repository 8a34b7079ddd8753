"""config.json of a model from a stranger: the one reader, which checks every field Mergesmith or transformers
reads before anything uses it.

A config.json is whatever its author (or an attacker) wrote. Sizes must be whole positive numbers of a size real
models have, names must be text, switches true or false; a value of the wrong kind is refused here, naming the
file and the field, instead of reaching the planner, the estimate or transformers as text where a number belongs.
Unset fields (absent, or null) are left to transformers' defaults. Torch-free.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guiapp.errors import CheckpointError, ModelConfigError
from guiapp.system.bounded import JSON_BYTES, describe_value, load_json_limited

CONFIG_FILE = "config.json"
CONFIG_HINT = "Restore the model's original config.json (download the model again), or correct that value."

# Counts and sizes (layers, heads, widths, vocabulary, context length) fit a 32-bit count in every real model;
# a larger one (10**30, or thousands of digits) comes from a damaged or hostile file.
MAX_COUNT = 2**31 - 1
_COUNTS = (
    "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "head_dim", "n_layer", "n_layers", "num_layers", "n_embd",
    "n_head", "n_positions", "n_inner",
)
_SWITCHES = ("tie_word_embeddings", "is_encoder_decoder")
_NAMES = ("model_type",)
_POSITIVE_NUMBERS = ("rope_theta",)
_FRACTIONS = ("partial_rotary_factor",)
_ROPE_SECTIONS = ("rope_scaling", "rope_parameters")
# Sections of multimodal models that hold the same fields for one part of the model.
_SUB_CONFIGS = ("text_config", "vision_config", "audio_config")
# torch_dtype / dtype name a torch dtype ("bfloat16", "torch.float16") or "auto".
_DTYPE_NAME = re.compile(r"(?:torch\.)?[a-z][a-z0-9_]{0,39}")


def read_model_config(path: Path) -> dict[str, Any]:
    """The checked JSON object in the model configuration file `path` (a config.json).

    Raises CheckpointError when the file cannot be read or is not JSON (see `load_json_limited`), and
    ModelConfigError when it is not an object or one of its fields has a value of the wrong kind.
    """
    document = load_json_limited(path, JSON_BYTES, CheckpointError, what="model configuration", hint=CONFIG_HINT)
    if not isinstance(document, dict):
        raise ModelConfigError(f"{path} is not a model configuration: it holds {describe_value(document)}, not a "
                               "table of settings.", hint=CONFIG_HINT)
    check_model_config(document, str(path))
    return document


def check_model_config(config: dict[str, Any], label: str, prefix: str = "") -> None:
    """Raise ModelConfigError naming `label` and the field when a field of `config` that Mergesmith or
    transformers reads has a value of the wrong kind. `prefix` names the section checked ("text_config.")."""
    for fields, check in _CHECKS:
        for field in fields:
            value = config.get(field)
            if value is not None:
                expected = check(value)
                if expected is not None:
                    _refuse(label, prefix + field, expected, value)
    architectures = config.get("architectures")
    if architectures is not None and not (isinstance(architectures, list)
                                          and all(_is_name(a) for a in architectures)):
        _refuse(label, prefix + "architectures", "a list of architecture names (text)", architectures)
    for section in _ROPE_SECTIONS:
        _check_rope(config.get(section), label, prefix + section)
    for section in _SUB_CONFIGS if not prefix else ():
        value = config.get(section)
        if value is not None and not isinstance(value, dict):
            _refuse(label, section, "a table of settings", value)
        if isinstance(value, dict):
            check_model_config(value, label, f"{section}.")


def _check_rope(section: Any, label: str, field: str) -> None:
    """Raise ModelConfigError for a rope section that is not a table, or whose factor or type is wrong."""
    if section is None:
        return
    if not isinstance(section, dict):
        _refuse(label, field, "a table of rope settings", section)
    for key in ("rope_type", "type"):
        if section.get(key) is not None and not _is_name(section[key]):
            _refuse(label, f"{field}.{key}", "a name (text)", section[key])
    for key in ("factor", "rope_theta", "low_freq_factor", "high_freq_factor", "attention_factor"):
        if section.get(key) is not None and _positive_number(section[key]) is not None:
            _refuse(label, f"{field}.{key}", "a positive number", section[key])
    if section.get("original_max_position_embeddings") is not None:
        expected = _count(section["original_max_position_embeddings"])
        if expected is not None:
            _refuse(label, f"{field}.original_max_position_embeddings", expected,
                    section["original_max_position_embeddings"])


def _refuse(label: str, field: str, expected: str, value: Any) -> None:
    raise ModelConfigError(f'{label} has a problem: "{field}" must be {expected}, not {describe_value(value)}.',
                           hint=CONFIG_HINT)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 200


def _count(value: Any) -> str | None:
    """None for a whole number from 0 to MAX_COUNT (written 1200 or 1200.0), or a list or table of them (one per
    layer or stage, as Gemma 3n, SegFormer or LXMERT write some sizes); else what was expected."""
    values = value.values() if isinstance(value, dict) else value if isinstance(value, list) else (value,)
    if all(_is_whole(v) for v in values):
        return None
    return f"a whole number from 0 to {MAX_COUNT:,}"


def _is_whole(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return (isinstance(value, int) or math.isfinite(value) and value.is_integer()) and 0 <= value <= MAX_COUNT


def _positive_number(value: Any) -> str | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return None
    return "a positive number"


def _fraction(value: Any) -> str | None:
    if _positive_number(value) is None and value <= 1:
        return None
    return "a number above 0 and at most 1"


def _switch(value: Any) -> str | None:
    return None if isinstance(value, bool) else "true or false"


def _name(value: Any) -> str | None:
    return None if _is_name(value) else "a name (text)"


def _dtype(value: Any) -> str | None:
    if isinstance(value, str) and _DTYPE_NAME.fullmatch(value):
        return None
    return 'the name of a number type, such as "bfloat16"'


_CHECKS: tuple[tuple[tuple[str, ...], Callable[[Any], str | None]], ...] = (
    (_COUNTS, _count),
    (_SWITCHES, _switch),
    (_NAMES, _name),
    (_POSITIVE_NUMBERS, _positive_number),
    (_FRACTIONS, _fraction),
    (("torch_dtype", "dtype"), _dtype),
)
