"""What `mergesmith moe` prints: the plan and estimate of a dry run, and the summary of a finished assembly, as text
or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from guiapp.moe.assemble import MoePlan
from guiapp.system.units import format_bytes

# How each gate mode routes, in plain words (the Experts page shows the same).
GATE_WORDS = {
    "hidden": "by what each expert's prompts mean to the base model (runs the base once per prompt set)",
    "hidden_last": "by what each expert's prompts mean to the base model (runs the base once per prompt set)",
    "cheap_embed": "by the words of each expert's prompts (no model is run)",
    "random": "at random (for training the router afterwards)",
    "uniform_random": "at random, as a fresh layer would be (for training the router afterwards)",
}


def plan_text(plan: MoePlan, out: Path, estimate: Any, *, as_json: bool = False) -> str:
    """The dry run's report: architecture, experts, gates, output size, reads, warnings and the estimate."""
    config = plan.config
    if as_json:
        return json.dumps({
            "architecture": plan.architecture.name, "base_model": str(config.base_model),
            "experts": [str(e.source_model) for e in config.experts],
            "shared_experts": [str(e.source_model) for e in config.shared_experts],
            "gate_mode": config.gate_mode, "experts_per_token": config.experts_per_token,
            "tensors": len(plan.planned), "output_bytes": plan.output_bytes, "input_bytes": plan.input_bytes,
            "fits": estimate.fit.fits, "estimate": estimate.summary(), "warnings": list(plan.warnings),
        }, indent=2)
    lines = [f"Architecture:  {plan.architecture.name}, {config.experts_per_token} of {len(config.experts)} experts "
             "per token",
             f"Base:          {config.base_model}"]
    lines += [f"Expert {i}:      {e.source_model}"[:200] for i, e in enumerate(config.experts)]
    lines += [f"Shared expert: {e.source_model}" for e in config.shared_experts]
    lines += [f"Routing:       {config.gate_mode}: {GATE_WORDS[config.gate_mode]}",
              f"Output:        {out} ({format_bytes(plan.output_bytes)}, {len(plan.planned)} tensors)",
              f"Reads:         {format_bytes(plan.input_bytes)}"]
    lines += [f"Warning:       {warning}" for warning in plan.warnings]
    lines += ["Estimate:      " + estimate.summary().replace("\n", "\n               "),
              "The configuration is valid. Nothing was written (--dry-run)."]
    return "\n".join(lines)


def summary_text(summary: dict[str, Any], *, as_json: bool = False) -> str:
    """A finished assembly's summary (`assemble_moe`'s, with the job's estimate)."""
    if as_json:
        return json.dumps(summary, indent=2, default=str)
    return (f"Model:   {summary['output']} ({summary['architecture']}, {summary['experts']} experts, "
            f"{format_bytes(summary['bytes'])} in {summary['tensors']} tensors)")
