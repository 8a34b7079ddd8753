"""mergekit-moe's configuration format, read unchanged: the base, the routed experts with their prompts, the gate mode,
the optional shared experts, the output dtype and architecture.

The YAML is parsed with the safe loader (bounded like a merge recipe); every problem is a RecipeError naming the key.
Keys mergekit-moe does not know are reported as warnings (mergekit-moe ignores them silently, so a misspelt
`gate_mode` would quietly route by hidden states).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guiapp.errors import RecipeError
from guiapp.facts.dtypes import is_writable_name, writable_name
from guiapp.hub.references import ModelRef
from guiapp.system.bounded import RECIPE_BYTES, check_value_size, parse_yaml_bounded, read_text_limited

# How each gate mode is computed (see guiapp.moe.gates), in mergekit-moe's names. "hidden_last" is mergekit's other
# name for "hidden".
GATE_MODES = ("hidden", "hidden_last", "cheap_embed", "random", "uniform_random")
PROMPT_FREE_MODES = ("random", "uniform_random")
TOP_LEVEL_KEYS = ("base_model", "experts", "gate_mode", "dtype", "experts_per_token", "shared_experts", "architecture")
EXPERT_KEYS = ("source_model", "positive_prompts", "negative_prompts", "noise_scale", "residual_scale")


@dataclass(frozen=True)
class Expert:
    """One expert: the model whose MLP it is and the prompts that route tokens to it."""

    source_model: ModelRef
    positive_prompts: tuple[str, ...] = ()
    negative_prompts: tuple[str, ...] = ()
    noise_scale: float | None = None
    residual_scale: float | None = None


@dataclass(frozen=True)
class MoeConfig:
    """A whole mergekit-moe configuration; `warnings` lists the keys that were ignored."""

    base_model: ModelRef
    experts: tuple[Expert, ...]
    gate_mode: str = "hidden"
    dtype: str | None = None
    experts_per_token: int = 2
    shared_experts: tuple[Expert, ...] = ()
    architecture: str | None = None
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def models(self) -> list[ModelRef]:
        """Every distinct model the assembly reads, the base first."""
        refs = [self.base_model, *(e.source_model for e in self.experts), *(e.source_model for e in self.shared_experts)]
        return list(dict.fromkeys(refs))


def load_moe_config(path: Path | str) -> tuple[MoeConfig, str]:
    """Read a mergekit-moe configuration file (a regular text file of at most 1 MB): the configuration and its text.

    Raises RecipeError when it cannot be read, is not YAML, or is not a valid configuration (naming the key).
    """
    text = read_text_limited(path, RECIPE_BYTES, RecipeError, what="MoE configuration")
    return parse_moe_config(text, label=str(path)), text


def parse_moe_config(text: str, label: str = "The MoE configuration") -> MoeConfig:
    """Parse mergekit-moe YAML (safe loader, bounded expansion). Raises RecipeError naming the key that is wrong."""
    document = parse_yaml_bounded(text, label, RecipeError)
    if not isinstance(document, dict):
        raise RecipeError(f"{label} must be a YAML mapping with base_model and experts.",
                          hint="See mergekit-moe's documentation for an example; the format is the same.")
    return moe_config_from_dict(document)


def moe_config_from_dict(document: dict[str, Any]) -> MoeConfig:
    """Build a MoeConfig from a parsed mapping (the window's form uses this too). Raises RecipeError."""
    check_value_size(document, "The MoE configuration", RecipeError)
    warnings = _unknown_keys(document, TOP_LEVEL_KEYS, "the configuration")
    if "base_model" not in document:
        raise RecipeError("The MoE configuration has no base_model.",
                          why="The base model gives the experts' shared parts (attention, embeddings, norms).",
                          hint="Add a line such as `base_model: mistralai/Mistral-7B-v0.1`.", key="base_model")
    base = ModelRef.parse(document["base_model"], "base_model")
    gate_mode = document.get("gate_mode", "hidden")
    if gate_mode not in GATE_MODES:
        close = difflib.get_close_matches(str(gate_mode), GATE_MODES, n=1)
        guess = f'Did you mean "{close[0]}"? ' if close else ""
        if gate_mode == "hidden_avg":
            guess = "hidden_avg (which averages over the padding too, in mergekit-moe) is not offered: use hidden. "
        raise RecipeError(f"gate_mode {gate_mode!r} is not one Mergesmith knows.",
                          hint=f"{guess}The modes are: {', '.join(GATE_MODES)}.", key="gate_mode")
    experts = _experts(document.get("experts"), "experts", warnings, gate_mode, required=True)
    shared = _experts(document.get("shared_experts"), "shared_experts", warnings, gate_mode, required=False)
    per_token = document.get("experts_per_token", 2)
    if isinstance(per_token, bool) or not isinstance(per_token, int) or per_token < 1:
        raise RecipeError(f"experts_per_token must be a whole number of 1 or more (got {per_token!r}).",
                          hint="2 is usual: each token goes through its two best experts.", key="experts_per_token")
    if per_token > len(experts):
        raise RecipeError(f"experts_per_token is {per_token} but there are only {len(experts)} experts.",
                          hint=f"Use at most {len(experts)}, or add experts.", key="experts_per_token")
    dtype = document.get("dtype")
    # mergekit-moe writes the half types and float32 (with their short names: bf16, fp16, fp32), not float64.
    if dtype is not None and not (isinstance(dtype, str) and is_writable_name(dtype) and writable_name(dtype) != "float64"):
        raise RecipeError(f"dtype {dtype!r} is not one Mergesmith writes.", hint="Use bfloat16, float16 or float32.",
                          key="dtype")
    architecture = document.get("architecture")
    if architecture is not None and not isinstance(architecture, str):
        raise RecipeError("architecture must be a name such as mixtral or qwen.",
                          hint="Leave it out to let Mergesmith pick, as mergekit-moe does.", key="architecture")
    if len(experts) > 1 and len({e.source_model for e in experts}) == 1:
        warnings.append("Every expert is the same model: the result answers as that model does, only larger, until "
                        "it is trained further (mergekit-moe refuses this without a flag).")
    config = MoeConfig(base, experts, gate_mode, dtype, per_token, shared, architecture, tuple(warnings))
    _check_prompts_differ(config)
    return config


def _experts(value: Any, key: str, warnings: list[str], gate_mode: str, *, required: bool) -> tuple[Expert, ...]:
    if value is None and not required:
        return ()
    if not isinstance(value, list) or (required and not value):
        raise RecipeError(f"{key} must be a list of experts, each with a source_model.",
                          hint="Example:\n  experts:\n    - source_model: org/model\n      positive_prompts: [\"...\"]",
                          key=key)
    # A shared expert may go without prompts: it then has no gate (DeepSeek-MoE's are always on).
    prompts_needed = required and gate_mode not in PROMPT_FREE_MODES
    return tuple(_expert(item, (key, index), warnings, prompts_needed) for index, item in enumerate(value))


def _expert(item: Any, key: tuple, warnings: list[str], prompts_needed: bool) -> Expert:
    where = f"{key[0]}[{key[1]}]"
    if not isinstance(item, dict) or "source_model" not in item:
        raise RecipeError(f"{where} must be a mapping with a source_model.",
                          hint="Example:\n  - source_model: org/model\n    positive_prompts: [\"...\"]", key=key)
    warnings += _unknown_keys(item, EXPERT_KEYS, where)
    positive = _prompts(item.get("positive_prompts"), (*key, "positive_prompts"))
    negative = _prompts(item.get("negative_prompts"), (*key, "negative_prompts"))
    if not positive and prompts_needed:
        raise RecipeError(f"{where} has no positive_prompts.",
                          why="The router sends a token to the experts whose prompts it most resembles; an expert "
                          "without prompts could never be chosen.",
                          hint="Give it a few example prompts of what it is good at, or use gate_mode: random.",
                          key=(*key, "positive_prompts"))
    return Expert(ModelRef.parse(item["source_model"], (*key, "source_model")), positive, negative,
                  _scale(item.get("noise_scale"), (*key, "noise_scale")),
                  _scale(item.get("residual_scale"), (*key, "residual_scale")))


def _prompts(value: Any, key: tuple) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise RecipeError(f"{'.'.join(map(str, key))} must be a list of non-empty texts.",
                          hint='Example: ["Write a poem about the sea", "Compose a sonnet"]', key=key)
    return tuple(value)


def _scale(value: Any, key: tuple) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecipeError(f"{'.'.join(map(str, key))} must be a number (got {value!r}).",
                          hint="Example: 0.5, or leave the line out.", key=key)
    return float(value)


def _check_prompts_differ(config: MoeConfig) -> None:
    """Refuse experts that all have the same prompts: every router row would be the same (mergekit-moe refuses too)."""
    if config.gate_mode in PROMPT_FREE_MODES or len(config.experts) < 2:
        return
    first = config.experts[0]
    if all((e.positive_prompts, e.negative_prompts) == (first.positive_prompts, first.negative_prompts)
           for e in config.experts[1:]):
        raise RecipeError("Every expert has the same prompts, so the router could not tell them apart.",
                          hint="Give each expert prompts of what it, and not the others, is good at.",
                          key="experts")


def _unknown_keys(mapping: dict, known: tuple[str, ...], where: str) -> list[str]:
    found = []
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            guess = f' (did you mean "{close[0]}"?)' if close else ""
            found.append(f'Unknown key "{key}" in {where} is ignored{guess}.')
    return found
