"""`mergesmith lora-resize`: a PEFT adapter made smaller, each module's update `B·A·scale` replaced by its best
approximation of a lower rank (the exact truncated SVD, the Eckart–Young optimum, from guiapp/lora/lowrank.py).

With `--rank R` every module keeps at most R directions (its own rank if smaller); with `--energy F` each module
keeps the fewest directions that hold the fraction F of ‖B·A·scale‖²_F. The scale is folded into the factors, so
the result has lora_alpha = r (scale 1) per module, with rank_pattern / alpha_pattern where ranks differ. Bias
updates are folded the same way; DoRA magnitudes and modules saved whole are carried over unchanged.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.adapters import LoraAdapter, open_adapter
from guiapp.errors import CheckpointError, SettingsError
from guiapp.facts.wording import say
from guiapp.hub.references import ModelRef
from guiapp.lora.adapter_output import adapter_card, write_adapter
from guiapp.lora.lowrank import RankRule, compute_dtype_for, decompose
from guiapp.progress import Progress

REPORT = "resize_report.json"


@dataclass(frozen=True)
class ResizeSettings:
    """What `mergesmith lora-resize` asks for: exactly one of `rank` and `energy`."""

    adapter: str
    out: Path
    rank: int | None = None
    energy: float | None = None
    overwrite: bool = False

    def rule(self) -> RankRule:
        """The rank rule; raises SettingsError (keyed "rank") unless exactly one valid choice is given."""
        if (self.rank is None) == (self.energy is None):
            raise SettingsError("Say how small the adapter should become: a rank or an energy to keep, not both.",
                                hint=say("Example: {rank:16}, or {energy:0.9} to keep 90 % of each module's update."),
                                key="rank")
        rule = RankRule("fixed", self.rank) if self.rank is not None else RankRule("energy", self.energy)
        rule.validate()
        return rule


def resize_adapter(settings: ResizeSettings, progress: Progress | None = None) -> dict[str, Any]:
    """Write the resized adapter at `settings.out`; return the summary (output, per-module ranks and energy).

    Raises SettingsError for a bad rank or energy, or a rank no smaller than every module's (nothing to resize),
    CheckpointError for a folder that is not a PEFT LoRA adapter or holds no LoRA factors, OutputError /
    InsufficientResourcesError for an output that cannot be written. The input is only read.
    """
    progress = progress or Progress()
    rule = settings.rule()
    progress.start_stage("Reading the adapter")
    adapter = open_adapter(ModelRef.parse(settings.adapter), progress=progress)
    _check_resizable(adapter, rule)
    progress.start_stage("Resizing", total=len(adapter.modules))
    tensors: dict[str, torch.Tensor] = dict(adapter.tensors)  # the keys it does not resize are carried over
    modules = []
    for name, lora in adapter.modules.items():
        a, b = adapter.tensors[lora.a_key], adapter.tensors[lora.b_key]
        compute = compute_dtype_for(a.dtype)
        product = b.reshape(b.shape[0], -1).to(compute) @ a.reshape(a.shape[0], -1).to(compute) * lora.scaling
        parts = decompose(product, RankRule(rule.mode, rule.value, max_rank=int(a.shape[0])), "exact")
        tensors[lora.a_key] = parts.right.reshape(parts.rank, *a.shape[1:]).to(a.dtype)
        tensors[lora.b_key] = parts.left.reshape(b.shape[0], parts.rank, *b.shape[2:]).to(b.dtype)
        if lora.bias_key is not None:
            bias = adapter.tensors[lora.bias_key]
            tensors[lora.bias_key] = (bias.to(compute) * lora.scaling).to(bias.dtype)
        modules.append({"module": name, "rank_before": int(a.shape[0]), "rank": parts.rank,
                        "energy_kept": round(parts.retained_energy, 6)})
        progress.step(name)
    config = _resized_config(adapter, {m["module"]: m["rank"] for m in modules})
    summary = _summary(settings, rule, modules)
    output = write_adapter(settings.out, tensors, config, _card(settings, summary, config), (REPORT, summary),
                           inputs=(adapter.folder,), overwrite=settings.overwrite, kind="lora-resize",
                           progress=progress)
    # In the extraction summary's form too, so the window's chart of the change each module keeps shows it.
    energies = [{"module": m["module"], "rank": m["rank"], "retained_energy": m["energy_kept"]} for m in modules]
    return {"output": str(output), **summary, "module_energies": energies}


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The resize summary as text: one line per module, then the totals."""
    width = max((len(m["module"]) for m in summary["modules"]), default=0)
    lines = [f"{m['module']:<{width}}  rank {m['rank_before']:>4} → {m['rank']:<4} energy kept {m['energy_kept']:.4f}"
             for m in summary["modules"]]
    totals = summary["totals"]
    return [*lines, f"{totals['modules']} modules, mean rank {totals['mean_rank_before']} → {totals['mean_rank']}, "
                    f"energy kept: mean {totals['mean_energy_kept']:.4f}, lowest {totals['lowest_energy_kept']:.4f}"]


def _check_resizable(adapter: LoraAdapter, rule: RankRule) -> None:
    if not adapter.modules:
        raise CheckpointError(f"{adapter.label} holds no LoRA factors (lora_A / lora_B), so there is nothing to "
                              "resize.", hint="Choose a LoRA adapter folder.")
    largest = max(int(adapter.tensors[lora.a_key].shape[0]) for lora in adapter.modules.values())
    if rule.mode == "fixed" and rule.value >= largest:
        raise SettingsError(
            f"The adapter's ranks are at most {largest}, so rank {int(rule.value)} would keep everything: resizing "
            "only makes an adapter smaller.", hint=say("Give a rank below {largest}, or {energy}.", largest=largest), key="rank")


def _resized_config(adapter: LoraAdapter, ranks: dict[str, int]) -> dict[str, Any]:
    """The input's configuration with the new ranks and alpha = rank (the scale is in the factors)."""
    common = Counter(ranks.values()).most_common(1)[0][0]
    pattern = {module: rank for module, rank in ranks.items() if rank != common}
    return {**adapter.config.document, "r": common, "lora_alpha": common, "rank_pattern": pattern,
            "alpha_pattern": dict(pattern), "use_rslora": False}


def _summary(settings: ResizeSettings, rule: RankRule, modules: list[dict[str, Any]]) -> dict[str, Any]:
    energies = [m["energy_kept"] for m in modules]
    return {
        "source": settings.adapter,
        "rule": {"rank": settings.rank} if rule.mode == "fixed" else {"energy": settings.energy},
        "modules": modules,
        "totals": {
            "modules": len(modules),
            "mean_rank_before": round(sum(m["rank_before"] for m in modules) / len(modules), 2),
            "mean_rank": round(sum(m["rank"] for m in modules) / len(modules), 2),
            "mean_energy_kept": round(math.fsum(energies) / len(energies), 6),
            "lowest_energy_kept": min(energies),
        },
    }


def _card(settings: ResizeSettings, summary: dict[str, Any], config: dict[str, Any]) -> str:
    totals = summary["totals"]
    asked = f"rank {settings.rank}" if settings.rank is not None else f"{settings.energy:g} of each module's energy"
    return adapter_card(config, f"LoRA resized from {settings.adapter}", [
        f"Made by Mergesmith from the adapter {settings.adapter}, keeping {asked}: each module's update B·A·scale "
        "was replaced by its best approximation of that rank (exact truncated SVD).", "",
        f"- Modules: {totals['modules']}",
        f"- Mean rank: {totals['mean_rank_before']} → {totals['mean_rank']}",
        f"- Energy kept: mean {totals['mean_energy_kept']:.4f}, lowest {totals['lowest_energy_kept']:.4f}", "",
        f"Per-module ranks and energy are in `{REPORT}`.",
    ])
