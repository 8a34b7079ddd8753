"""`mergesmith lora-merge`: several PEFT LoRA adapters combined into one, exactly as PEFT's
`add_weighted_adapter` combines them (peft/tuners/lora/model.py), so the result is the adapter PEFT would make.

Per module, over the adapters that adapt it (adapters may target different modules), with wᵢ the weight and sᵢ
the adapter's own scale (lora_alpha / r, or / √r with rsLoRA):
- linear: A = Σ sign(wᵢsᵢ)·√|wᵢsᵢ|·Aᵢ and B = Σ √|wᵢsᵢ|·Bᵢ, combined separately (not the weighted sum of the
  updates: cross terms remain); needs equal ranks.
- ties: the same weights, A and B each merged by TIES: the largest `density` fraction of each factor's entries
  kept, the sign elected from their sum, the agreeing entries averaged; needs equal ranks and a density.
- cat: the factors stacked, A's rows scaled by wᵢsᵢ: exactly Σ wᵢsᵢ·Bᵢ·Aᵢ, of rank Σ rᵢ.
- svd: the exact truncated SVD (B = U·S, A = Vᵀ) of Σ wᵢsᵢ·Bᵢ·Aᵢ at `rank` (default: the largest rᵢ).
The result has r = lora_alpha = the new rank (PEFT's choice; its scale is 1, or √r when the first adapter uses
rsLoRA, as PEFT keeps that setting), target_modules the union of the adapters', and the other settings of the
first adapter. With one adapter, PEFT always uses linear.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.adapters import LoraAdapter, LoraModule, open_adapter
from guiapp.errors import CheckpointError, IncompatibleModelsError, SettingsError
from guiapp.facts.wording import say
from guiapp.hub.references import ModelRef
from guiapp.lora.adapter_output import adapter_card, write_adapter
from guiapp.progress import Progress

METHODS = ("linear", "cat", "svd", "ties")
REPORT = "merge_report.json"
_PEFT_MERGE = "PEFT's add_weighted_adapter"


@dataclass(frozen=True)
class CombineSettings:
    """What `mergesmith lora-merge` asks for. `rank` is for svd only, `density` for ties only."""

    adapters: tuple[str, ...]
    weights: tuple[float, ...]
    method: str
    out: Path
    rank: int | None = None
    density: float | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        """Raises SettingsError (keyed by the setting) for settings PEFT would refuse or ignore."""
        if not self.adapters:
            raise SettingsError("Name the adapters to combine.", hint=say("{cli_only:Example: lora-merge A B {weights:1 1} …}"
                                                                               "{window_only:Add the adapters to combine.}"),
                                key="adapters")
        if len(self.weights) != len(self.adapters) or not all(math.isfinite(w) for w in self.weights):
            raise SettingsError(f"Give one weight (a number) per adapter: {len(self.adapters)} adapters, "
                                f"{len(self.weights)} weights.", hint=say("Example: {weights:1 0.5}"), key="weights")
        if self.method not in METHODS:
            raise SettingsError(f'"{self.method}" is not a way to combine adapters.',
                                hint="Use linear, cat, svd or ties.", key="method")
        if self.rank is not None and (self.method != "svd" or self.rank < 1):
            raise SettingsError(say("{cli_only:{rank} sets the rank of}{window_only:A rank is set only for} an svd "
                                    "combination (a whole number of at least 1); {combination} decides the rank "
                                    "itself.", combination=self.method), hint=say("Use {svd_rank:R}."),
                                key="rank")
        if self.method == "ties" and not (self.density is not None and 0 < self.density <= 1):
            raise SettingsError("ties needs the fraction of each factor's entries to keep, above 0 and at most 1 "
                                f"(got {self.density}).", hint=say("Example: {density:0.5}"), key="density")
        if self.method != "ties" and self.density is not None:
            raise SettingsError(say("{cli_only:{density}}{window_only:The density} is used by ties only, not by "
                                    "{combination}.", combination=self.method),
                                hint=say("Leave {density} out, or use {method:ties}."), key="density")


def combine_adapters(settings: CombineSettings, progress: Progress | None = None) -> dict[str, Any]:
    """Write the combination at `settings.out`; return the summary (output, rank, per-module contributions).

    Raises SettingsError for bad settings, CheckpointError for a folder that is not a plain PEFT LoRA adapter or
    is one that cannot be combined (DoRA, saved modules, bias updates), IncompatibleModelsError for adapters of
    different models or ranks where the method needs equal ones, or a rank larger than a module allows,
    OutputError / InsufficientResourcesError for an output that cannot be written. Inputs are only read.
    """
    progress = progress or Progress()
    progress.start_stage("Reading the adapters")
    adapters = [open_adapter(ModelRef.parse(ref), progress=progress) for ref in settings.adapters]
    for adapter in adapters:
        _check_combinable(adapter)
    method = "linear" if len(adapters) == 1 else settings.method
    new_rank = _new_rank(adapters, method, settings.rank)
    modules = _modules(adapters)
    progress.start_stage("Combining", total=len(modules))
    tensors: dict[str, torch.Tensor] = {}
    report = []
    for name, members in modules.items():
        pairs = [(adapters[i].tensors[lora.a_key], adapters[i].tensors[lora.b_key]) for i, lora in members]
        weights = [(settings.weights[i], lora.scaling) for i, lora in members]
        a, b = _combine(name, method, pairs, weights, new_rank, settings.density)
        first = members[0][1]
        tensors[first.a_key], tensors[first.b_key] = a.to(pairs[0][0].dtype), b.to(pairs[0][1].dtype)
        report.append({"module": name, "adapters": [adapters[i].label for i, _ in members], "rank": int(a.shape[0])})
        progress.step(name)
    config = _combined_config(adapters, new_rank)
    warnings = _base_warnings(adapters)
    for warning in warnings:
        progress.warn(warning)
    summary = {"adapters": list(settings.adapters), "weights": list(settings.weights), "method": method,
               "density": settings.density, "rank": new_rank, "modules": report, "warnings": warnings}
    output = write_adapter(settings.out, tensors, config, _card(settings, method, new_rank, config, warnings),
                           (REPORT, summary), inputs=tuple(a.folder for a in adapters), overwrite=settings.overwrite,
                           kind="lora-merge", progress=progress)
    return {"output": str(output), **summary}


def _check_combinable(adapter: LoraAdapter) -> None:
    """Refuse what add_weighted_adapter cannot combine faithfully: its result would silently lose it."""
    dora = any(lora.magnitude_key for lora in adapter.modules.values()) or adapter.config.flag("use_dora")
    lost = ("it is a DoRA adapter (its magnitudes cannot be combined)" if dora
            else "it changes biases too (lora_bias)" if any(lora.bias_key for lora in adapter.modules.values())
            else "it saves whole modules (modules_to_save)" if adapter.replacements or adapter.config.modules_to_save
            else None)
    if lost:
        raise CheckpointError(
            f"{adapter.label} cannot be combined: {lost}, and a combination keeps only the LoRA factors.",
            why=f"{_PEFT_MERGE} combines lora_A and lora_B only; the rest would be dropped without a word.",
            hint="Combine plain LoRA adapters, or apply this one to the model first (apply-lora) and merge models.")
    if not adapter.modules:
        raise CheckpointError(f"{adapter.label} holds no LoRA factors (lora_A / lora_B).",
                              hint="Choose LoRA adapter folders.")


def _config_rank(adapter: LoraAdapter) -> int:
    """The rank PEFT counts for an adapter: r, or the largest rank_pattern value when larger."""
    return max([adapter.config.r, *(int(value) for _, value in adapter.config.rank_pattern)])


def _new_rank(adapters: list[LoraAdapter], method: str, asked: int | None) -> int:
    ranks = [_config_rank(adapter) for adapter in adapters]
    if method in ("linear", "ties"):
        if len(set(ranks)) != 1:
            listed = ", ".join(f"{adapter.label}: {rank}" for adapter, rank in zip(adapters, ranks))
            raise IncompatibleModelsError(
                f"{method} combines adapters of the same rank only, and these differ ({listed}).",
                why=f"{method} adds the adapters' lora_A and lora_B factors entry by entry, which needs equal shapes "
                f"({_PEFT_MERGE} refuses this too).",
                hint=say("Use {method:cat} (exact) or {method:svd}, or resize the adapters to one rank"
                         "{aside:lora-resize}."))
        return ranks[0]
    if method == "cat":
        return sum(ranks)
    return asked or max(ranks)


def _modules(adapters: list[LoraAdapter]) -> dict[str, list[tuple[int, LoraModule]]]:
    """Each adapted module, with the adapters (by index) that adapt it; refused when they disagree on its shape."""
    modules: dict[str, list[tuple[int, LoraModule]]] = {}
    for index, adapter in enumerate(adapters):
        for name, lora in adapter.modules.items():
            modules.setdefault(name, []).append((index, lora))
    for name, members in modules.items():
        shapes = {_update_shape(adapters[i], lora) for i, lora in members}
        if len(shapes) > 1:
            made_for = "; ".join(f"{adapters[i].label} for {adapters[i].base_model or 'an unnamed base'}"
                                 for i, _ in members)
            raise IncompatibleModelsError(
                f"The adapters change {name} with updates of different shapes "
                f"({', '.join(_shape(s) for s in sorted(shapes))}): they were made for different models ({made_for}).",
                hint="Combine adapters trained on the same base model.")
    return modules


def _combine(name: str, method: str, pairs: list[tuple[torch.Tensor, torch.Tensor]],
             weights: list[tuple[float, float]], new_rank: int, density: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The combined (A, B) of one module from each adapter's factors and (weight, scale), multiplied in PEFT's
    order so the result matches its own to the last bit where the arithmetic allows."""
    scaled = [weight * scale for weight, scale in weights]
    a_list = [a.to(torch.float32) if a.dtype != torch.float64 else a for a, _ in pairs]
    b_list = [b.to(a.dtype) for (_, b), a in zip(pairs, a_list)]
    if method in ("linear", "ties"):
        if len({a.shape for a in a_list}) > 1:
            raise IncompatibleModelsError(
                f"{method} needs every adapter to give {name} the same rank; here they are "
                f"{', '.join(str(a.shape[0]) for a in a_list)}.",
                hint=say("Use {method:cat} or svd, or resize the adapters to one rank{aside:lora-resize}."))
        a_weights = [math.copysign(math.sqrt(abs(s)), s) if s != 0 else 0.0 for s in scaled]
        b_weights = [math.sqrt(abs(s)) for s in scaled]
        if method == "linear":
            return _weighted_sum(a_list, a_weights), _weighted_sum(b_list, b_weights)
        return _ties(a_list, a_weights, density), _ties(b_list, b_weights, density)
    if method == "cat":
        a = torch.zeros(new_rank, *a_list[0].shape[1:], dtype=a_list[0].dtype)
        b = torch.zeros(b_list[0].shape[0], new_rank, *b_list[0].shape[2:], dtype=b_list[0].dtype)
        stacked_a = torch.cat([a_i * weight * scale for a_i, (weight, scale) in zip(a_list, weights)], dim=0)
        a[: stacked_a.shape[0]] = stacked_a
        b[:, : stacked_a.shape[0]] = torch.cat(b_list, dim=1)
        return a, b
    return _svd(name, a_list, b_list, weights, new_rank)


def _weighted_sum(tensors: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    stacked = torch.stack(tensors)
    return (stacked * torch.tensor(weights, dtype=stacked.dtype).view(-1, *[1] * (stacked.dim() - 1))).sum(dim=0)


def _ties(tensors: list[torch.Tensor], weights: list[float], density: float) -> torch.Tensor:
    """PEFT's `ties`: keep each tensor's largest `density` fraction of entries, elect each entry's sign from the
    kept entries' sum (unweighted, as PEFT does), average the weighted entries that agree with it."""
    kept = torch.stack([_largest(t, density) for t in tensors])
    elected = torch.where(kept.sum(dim=0) >= 0, 1, -1).to(kept.dtype)
    agree = kept.sign() == elected
    weighted = kept * torch.tensor(weights, dtype=kept.dtype).view(-1, *[1] * (kept.dim() - 1))
    return (weighted * agree).sum(dim=0) / torch.clamp(agree.sum(dim=0), min=1)


def _largest(tensor: torch.Tensor, density: float) -> torch.Tensor:
    """`tensor` with all but its int(density · size) largest-magnitude entries set to zero (none when density is 1)."""
    if density >= 1:
        return tensor
    mask = torch.zeros(tensor.numel(), dtype=tensor.dtype)
    mask[torch.topk(tensor.abs().reshape(-1), k=int(density * tensor.numel()), largest=True).indices] = 1
    return tensor * mask.reshape(tensor.shape)


def _svd(name: str, a_list: list[torch.Tensor], b_list: list[torch.Tensor], weights: list[tuple[float, float]],
         new_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """B = U·S and A = Vᵀ of the exact rank-`new_rank` SVD of Σ sᵢ·Bᵢ·Aᵢ (as PEFT, which follows kohya's
    svd_merge_lora). Raises IncompatibleModelsError when the module cannot hold `new_rank` directions."""
    updates = [(b.reshape(b.shape[0], -1) @ a.reshape(a.shape[0], -1)) * scale
               for a, b, (_, scale) in zip(a_list, b_list, weights)]
    delta = _weighted_sum(updates, [weight for weight, _ in weights])
    if new_rank > min(delta.shape):
        raise IncompatibleModelsError(
            f"{name} is a {_shape(tuple(delta.shape))} update, which holds at most {min(delta.shape)} directions: "
            f"rank {new_rank} does not fit.", hint=say("Use {rank} or less.", rank=min(delta.shape)))
    u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    a, b = vh[:new_rank], u[:, :new_rank] * s[:new_rank]
    return a.reshape(new_rank, *a_list[0].shape[1:]), b.reshape(b_list[0].shape[0], new_rank, *b_list[0].shape[2:])


def _combined_config(adapters: list[LoraAdapter], new_rank: int) -> dict[str, Any]:
    """The first adapter's configuration with PEFT's changes: the new rank as r and alpha, no patterns, the
    union of target modules. Refused, as PEFT refuses it, when some adapters name targets as a list and others
    as one pattern."""
    targets = [adapter.config.document.get("target_modules") for adapter in adapters]
    if all(isinstance(t, list) for t in targets):
        union: list[str] | str = sorted({name for t in targets for name in t})
    elif all(isinstance(t, str) for t in targets):
        union = "|".join(f"({t})" for t in targets)
    else:
        raise CheckpointError(
            "Some of these adapters name their target modules as a list and others as one pattern, which cannot be "
            "joined into one setting (PEFT refuses this too).",
            hint="Combine adapters whose adapter_config.json name target_modules the same way.")
    return {**adapters[0].config.document, "r": new_rank, "lora_alpha": new_rank, "target_modules": union,
            "rank_pattern": {}, "alpha_pattern": {}}


def _base_warnings(adapters: list[LoraAdapter]) -> list[str]:
    bases = {adapter.base_model for adapter in adapters if adapter.base_model}
    if len(bases) <= 1:
        return []
    return [f"The adapters name different base models ({', '.join(sorted(bases))}); their shapes agree, so they "
            "were combined, but the result is meaningful only if those bases are the same model."]


def _update_shape(adapter: LoraAdapter, lora: LoraModule) -> tuple[Any, ...]:
    a, b = adapter.tensors[lora.a_key], adapter.tensors[lora.b_key]
    return (int(b.shape[0]), *(int(d) for d in a.shape[1:]), tuple(b.shape[2:]), lora.transposed)


def _shape(shape: tuple[Any, ...]) -> str:
    return " × ".join(str(d) for d in shape if isinstance(d, int) and not isinstance(d, bool))


def _card(settings: CombineSettings, method: str, rank: int, config: dict[str, Any], warnings: Sequence[str]) -> str:
    listed = [f"- {ref} (weight {weight:g})" for ref, weight in zip(settings.adapters, settings.weights)]
    density = f", density {settings.density:g}" if settings.density is not None else ""
    return adapter_card(config, "LoRA combined from several adapters", [
        f"Made by Mergesmith by combining these adapters with the {method} method{density}, as {_PEFT_MERGE} does; "
        f"rank {rank}:", "", *listed, "", *[f"Warning: {w}" for w in warnings],
        f"Which adapters changed each module is in `{REPORT}`.",
    ])


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The combination's summary as text: the method and rank, one line per module, then any warning."""
    width = max((len(m["module"]) for m in summary["modules"]), default=0)
    return [f"{summary['method']} combination of {len(summary['adapters'])} adapters, rank {summary['rank']}",
            *(f"{m['module']:<{width}}  rank {m['rank']:<4} from {len(m['adapters'])} adapter"
              f"{'s' if len(m['adapters']) != 1 else ''}" for m in summary["modules"]),
            *(f"Warning: {w}" for w in summary["warnings"])]
