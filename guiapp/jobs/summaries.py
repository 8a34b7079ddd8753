"""What a finished job produced, in a sentence or two for the Jobs page: one wording per kind of job (the
registry `guiapp.jobs.specs.JOB_KINDS` names which)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guiapp.jobs.extraction_words import least_kept_sentence
from guiapp.system.units import format_bytes, format_seconds


def merge_summary(summary: Mapping[str, Any]) -> str:
    text = (f"Wrote {summary.get('tensors')} tensors ({format_bytes(summary.get('output_bytes', 0))}) to "
            f"{summary.get('output')} in {format_seconds(max(0.0, summary.get('seconds', 0)))}.")
    return text + "".join(f"\nWarning: {w}" for w in summary.get("warnings") or [])


def extraction_report(summary: Mapping[str, Any]) -> str:
    """The extraction's end report: size, retained energy, worst modules, and a warning when nearly empty."""
    totals = summary.get("totals", summary)
    energy = totals.get("mean_retained_energy")
    lines = [f"Adapter: {summary.get('output')} ({format_bytes(totals.get('adapter_bytes') or 0)}).",
             f"Modules: {totals.get('lora_modules')} as LoRA, {totals.get('saved_modules')} saved whole, "
             f"{totals.get('unchanged_modules')} unchanged."]
    if energy is not None:
        lines.append(f"Change kept: {energy:.0%} on average.")
    if least := least_kept_sentence(summary):
        lines.append(least)
    if not totals.get("lora_modules") and not totals.get("saved_modules"):
        lines.append("Warning: this adapter is nearly empty: the fine-tune hardly differs from the base.")
    elif energy is not None and energy < 0.5:
        lines.append("Warning: the adapter keeps less than half of the fine-tune's changes; raise the rank.")
    lines += [f"Note: {w}" for w in summary.get("warnings") or []]
    return "\n".join(lines)


def apply_summary(summary: Mapping[str, Any]) -> str:
    return (f"Wrote {summary.get('output')} ({format_bytes(summary.get('bytes', 0))}): {summary.get('changed')} "
            f"tensors changed by the adapter, {summary.get('replaced')} replaced.")


def moe_summary(summary: Mapping[str, Any]) -> str:
    return (f"Wrote {summary.get('output')} ({format_bytes(summary.get('bytes', 0))}): a "
            f"{summary.get('architecture')} model with {summary.get('experts')} experts.")


def resize_summary(summary: Mapping[str, Any]) -> str:
    totals = summary.get("totals") or {}
    return (f"Wrote {summary.get('output')}: {totals.get('modules')} modules, mean rank {totals.get('mean_rank_before')}"
            f" → {totals.get('mean_rank')}; each module keeps {totals.get('mean_energy_kept', 0):.0%} of its change "
            f"on average, {totals.get('lowest_energy_kept', 0):.0%} at least.")


def combine_summary(summary: Mapping[str, Any]) -> str:
    return (f"Wrote {summary.get('output')}: {len(summary.get('adapters') or [])} adapters combined ({summary.get('method')}"
            f"), rank {summary.get('rank')}." + "".join(f"\nNote: {w}" for w in summary.get("warnings") or []))


def gguf_summary(summary: Mapping[str, Any]) -> str:
    text = f"Wrote {summary.get('file')} ({format_bytes(summary.get('bytes', 0))})."
    check = summary.get("check")
    return text + (f"\n{check['summary']}" if check else "")


def lab_summary(summary: Mapping[str, Any]) -> str:
    return (f"Best perplexity {summary.get('best_perplexity'):.3f} (the recipe as given: "
            f"{summary.get('start_perplexity'):.3f}) after {summary.get('trials')} trials; the best recipe is "
            f"{summary.get('best_recipe')}.")


def try_summary(summary: Mapping[str, Any]) -> str:
    return "\n\n".join(f"{g['model']} ({g['dtype']}): {g['text'].strip()}" for g in summary["generations"])


def perplexity_summary(summary: Mapping[str, Any]) -> str:
    return "\n".join(f"{r['model']}: perplexity {r['perplexity']:.3f}" if r["perplexity"] is not None else
                     f"{r['model']}: mean similarity {r['mean_similarity']:.4f}" for r in summary["results"])


def publish_summary(summary: Mapping[str, Any]) -> str:
    return f"Published {summary.get('repo')}: {summary.get('url')}"


def saved_summary(summary: Mapping[str, Any]) -> str:
    return f"Saved in {summary.get('output')}."
