"""Try jobs: generate side by side, perplexity and encoder similarity for one to four models.

Each model's dtype comes from the probe for job kind "try" (its storage dtype where the device computes in it
at full speed, float32 otherwise), unless the caller names one. Whether the models stay loaded together or are
loaded one at a time is decided before loading, from their size in that dtype against the memory free now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from guiapp.errors import ON_CPU, DeviceError, SettingsError
from guiapp.facts.dtypes import BY_NAME, dtype_name
from guiapp.inference.sampling import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, TRUNCATE
from guiapp.jobs.runner import Job, JobSpec
from guiapp.progress import Progress
from guiapp.system.units import plural

MAX_MODELS = 4
# Room left for activations, the KV cache and the tokenizer when judging whether models fit together.
_LOADED_MODEL_OVERHEAD = 1.2

OutputListener = Callable[[int, str], None]


@dataclass(frozen=True)
class TryModelPlan:
    """One model of a Try job: its reference, storage dtype, the dtype it runs in, and bytes once loaded."""

    reference: str
    storage_dtype: str
    run_dtype: str
    note: str
    loaded_bytes: int
    parameters: int = 0


@dataclass(frozen=True)
class TryPlan:
    """The models of a Try job and whether they are kept loaded together (`together`) or loaded in turn."""

    device: str
    models: list[TryModelPlan]
    together: bool
    reason: str

    def describe(self) -> list[str]:
        from guiapp.system.units import format_bytes

        lines = [f"{m.reference}: runs in {m.run_dtype}" + (f" ({m.note})" if m.note else "")
                 + f", about {format_bytes(m.loaded_bytes)} loaded" for m in self.models]
        return lines + [self.reason]


@dataclass
class ModelShelf:
    """Models kept loaded between Try jobs (the window's Try page keeps one), by reference, dtype and device.

    A kept model is used again only while its folder is the same one (a job that writes its output again renames
    a new folder into place, and the new model is loaded instead).
    """

    loaded: dict[tuple[str, str, str], tuple[tuple, Any]] = field(default_factory=dict)

    def take(self, key: tuple[str, str, str], identity: tuple, load: Callable[[], Any], keep: bool) -> Any:
        """The model for `key` (loaded now by `load()` unless kept with the same folder `identity`); kept for
        next time when `keep`, otherwise every kept model is let go first so only one is in memory."""
        kept = self.loaded.pop(key, None)
        if kept is not None and kept[0] == identity:
            model = kept[1]
        else:
            if not keep:
                self.loaded.clear()
            model = load()
        if keep:
            self.loaded[key] = (identity, model)
        return model


def plan_try(references: list[str], device: str = "cpu", dtype: str | None = None, probe_result=None) -> TryPlan:
    """Decide each model's run dtype and whether all fit in memory together, from headers alone.

    `dtype` None keeps each model's storage dtype (as the probe allows). Raises SettingsError for no models or more
    than four, DeviceError when the probe says the device cannot run the dtype at all, CheckpointError when a
    config.json does not describe its weights (`guiapp.inference.checks`), InsufficientResourcesError when
    one model's weights alone exceed the free memory, and the header readers' CheckpointError / HubError
    subclasses.
    """
    from guiapp.checkpoints.sources import read_headers
    from guiapp.hub.references import ModelRef
    from guiapp.inference.checks import check_built_size, check_config_matches_weights, check_fits_in_memory
    from guiapp.system.capabilities import inference_option
    from guiapp.system.probe import probe
    from guiapp.system.resources import gpu_memory, memory
    from guiapp.system.units import format_bytes

    if not 1 <= len(references) <= MAX_MODELS:
        raise SettingsError(f"Try compares one to {MAX_MODELS} models; {len(references)} were given.",
                            hint=f"Pick between one and {MAX_MODELS} models.", key="models")
    probe_result = probe_result or probe()
    free = memory().available if device == "cpu" else (gpu_memory(device).free or 0)
    plans = []
    for reference in references:
        headers = read_headers(ModelRef.parse(reference))
        # Before anything is built: transformers allocates the model config.json describes, weights or not.
        check_config_matches_weights(headers.config, headers.tensors, reference)
        if headers.config:
            check_built_size(headers.config, headers.tensors, reference)
        storage = dtype or _storage_dtype(headers.tensors.values())
        chosen = inference_option(probe_result, device, storage)
        if not chosen.possible:
            raise DeviceError(f"{reference} cannot run in {storage} on {device}: {chosen.reason}.",
                              hint="Pick another device or dtype; the dropdowns offer what works here.",
                              remedy=ON_CPU if device != "cpu" else None)
        parameters = sum(info.numel for info in headers.tensors.values())
        weights = parameters * BY_NAME[chosen.compute_dtype].bytes
        check_fits_in_memory(reference, weights, free, device)
        loaded = int(weights * _LOADED_MODEL_OVERHEAD)
        plans.append(TryModelPlan(reference, storage, chosen.compute_dtype, chosen.note, loaded, parameters))
    needed = sum(p.loaded_bytes for p in plans)
    together = needed <= free
    what = "The model fits in memory" if len(plans) == 1 else f"All {len(plans)} models fit in memory together"
    reason = (f"{what} ({format_bytes(needed)} of {format_bytes(free)} free)."
              if together else f"The models need {format_bytes(needed)} together and {format_bytes(free)} is free: "
              "they are loaded one at a time.")
    return TryPlan(device, plans, together, reason)


def estimate_try_time(references: list[str], *, prompt: str = "", max_new_tokens: int = 128,
                      text: str | None = None, device: str = "cpu", dtype: str | None = None, probe_result=None,
                      startup_seconds: float = 0.0):
    """How long Generate (`prompt`, `max_new_tokens`) or, given `text`, Perplexity takes for `references` (a
    guiapp.system.resources.TimeEstimate; `startup_seconds` as for estimate_duration), before the job. None when a
    model cannot be read, the machine has not been probed yet, or there is nothing to go by. Never raises."""
    from guiapp.jobs.estimates import estimate_generation, estimate_perplexity
    from guiapp.system.probe import cached_probe

    probe_result = probe_result or cached_probe()
    if probe_result is None:
        return None
    try:
        plan = plan_try(references, device, dtype, probe_result)
    except Exception:  # unreadable or missing models: the job says why when it starts
        return None
    if text is not None:
        return estimate_perplexity(plan, text, probe_result, startup_seconds=startup_seconds)
    return estimate_generation(plan, prompt, max_new_tokens, probe_result, startup_seconds=startup_seconds)


def _storage_dtype(tensors) -> str:
    """The floating dtype holding most of a model's parameters ("float32" when it has none)."""
    counts: dict[str, int] = {}
    for info in tensors:
        if info.dtype.is_floating_point:
            name = dtype_name(info.dtype)
            counts[name] = counts.get(name, 0) + info.numel
    return max(counts, key=counts.get) if counts else "float32"


def _sources(plan: TryPlan, progress: Progress) -> list:
    """Each planned model's folders: the Hub models among them downloaded first, under one Downloading bar."""
    from guiapp.inference.running import resolve_sources

    return resolve_sources([model_plan.reference for model_plan in plan.models], progress)


def _load(model_plan: TryModelPlan, source, device: str, shelf: ModelShelf, keep: bool, progress: Progress):
    import torch

    from guiapp.hub.references import ModelRef
    from guiapp.inference.running import load_model

    def load():
        progress.start_stage(f"Loading {ModelRef.parse(model_plan.reference).short_name}")
        return load_model(source, getattr(torch, model_plan.run_dtype), device, progress)

    return shelf.take((model_plan.reference, model_plan.run_dtype, device), _folder_identity(model_plan.reference),
                      load, keep)


def _folder_identity(reference: str) -> tuple:
    """What changes when a local model or adapter folder is replaced (a job writing its output again renames a
    new folder into place), so a kept model is not mistaken for the new one. Empty for Hub models."""
    from guiapp.hub.references import ModelRef

    ref = ModelRef.parse(reference)
    identity = []
    for part in (ref, ref.adapter):
        folder = part.folder if part else None
        if folder is not None and folder.is_dir():
            facts = folder.stat()
            identity.append((facts.st_ino, facts.st_mtime_ns))
    return tuple(identity)


def _set_part(progress: Progress, index: int, count: int) -> None:
    """Stages over several models say which model they are at ("model 2 of 3"); over one, nothing is added."""
    progress.set_part(f"model {index + 1} of {count}" if count > 1 else "")


def _log_estimate(time, progress: Progress) -> dict[str, Any]:
    """Log a Try job's time estimate (when there is one); what its summary keeps of it."""
    from guiapp.jobs.estimates import summary_of_time

    if time is not None:
        progress.log(f"Estimate: {time}")
    return summary_of_time(time)


@dataclass(frozen=True)
class TrySpec(JobSpec):
    """Generate: a continuation of `prompt` with each of `references` in turn (`temperature` and `top_p` apply
    when `sample` is True). A prompt longer than a model reads keeps its end, with a warning, or with
    `long_prompt` "refuse" fails the job (see `guiapp.inference.running.fit_context`)."""

    kind: ClassVar[str] = "try"
    references: list[str]
    prompt: str
    max_new_tokens: int = 128
    sample: bool = False
    seed: int = 0
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    long_prompt: str = TRUNCATE
    device: str = "cpu"
    dtype: str | None = None

    def job(self, on_output: OutputListener | None = None, shelf: ModelShelf | None = None,
            probe_result=None) -> Job:
        """`on_output(index, text)` receives each model's text as it streams (from the job's thread). The summary
        has "generations": one {"model", "text", "tokens", "dtype", "untrained"} per model ("untrained": why a
        sample model writes gibberish, else None). Cancel stops at the next token."""

        def work(progress: Progress) -> dict[str, Any]:
            from guiapp.checkpoints.samples import untrained_note
            from guiapp.inference.running import GenerationSettings, generate, readable_text
            from guiapp.jobs.estimates import estimate_generation
            from guiapp.system.probe import cached_probe

            settings = GenerationSettings(max_new_tokens=self.max_new_tokens, sample=self.sample, seed=self.seed,
                                          temperature=self.temperature, top_p=self.top_p,
                                          long_prompt=self.long_prompt)
            readable, note = readable_text(self.prompt, "prompt")
            if note:
                progress.log(note)
            plan = plan_try(self.references, self.device, self.dtype, probe_result)
            for line in plan.describe():
                progress.log(line)
            estimated = _log_estimate(estimate_generation(plan, self.prompt, self.max_new_tokens,
                                                          probe_result or cached_probe()), progress)
            models_shelf = shelf or ModelShelf()
            generations = []
            for index, (model_plan, source) in enumerate(zip(plan.models, _sources(plan, progress), strict=True)):
                _set_part(progress, index, len(plan.models))
                loaded = _load(model_plan, source, self.device, models_shelf, plan.together, progress)
                listener = (lambda text, index=index: on_output(index, text)) if on_output else None
                result = generate(loaded, readable, settings, progress, listener)
                generations.append({"model": model_plan.reference, "text": result.text, "tokens": result.token_ids,
                                    "dtype": model_plan.run_dtype, "untrained": untrained_note(source.folder)})
            return {"generations": generations, **estimated}

        return Job(title=f"Try {plural(len(self.references), 'model')}", kind=self.kind, spec=self.to_dict(),
                   work=work)


def try_job(references: list[str], prompt: str, *, on_output: OutputListener | None = None,
            shelf: ModelShelf | None = None, probe_result=None, **settings: Any) -> Job:
    """A Generate job with `settings` (see `TrySpec`); `on_output` as for `TrySpec.job`."""
    return TrySpec(list(references), prompt, **settings).job(on_output, shelf, probe_result)


@dataclass(frozen=True)
class PerplexitySpec(JobSpec):
    """Each of `references`' perplexity on `text` (for an encoder: the cosine similarity of the text's sentence
    pairs, see `guiapp.inference.running.sentence_pairs`), over windows of `window` tokens."""

    kind: ClassVar[str] = "perplexity"
    references: list[str]
    text: str
    window: int = 512
    device: str = "cpu"
    dtype: str | None = None

    def job(self, shelf: ModelShelf | None = None, probe_result=None) -> Job:
        """The summary has "results": per model {"model", "kind", "perplexity", "tokens", "dtype", "untrained"}
        (see `TrySpec.job`) for a causal LM, or
        {"model", "kind", "perplexity": None, "similarities", "mean_similarity", "dtype"} for an encoder. Cancel
        stops between windows."""
        references, text, window, device, dtype = self.references, self.text, self.window, self.device, self.dtype

        def work(progress: Progress) -> dict[str, Any]:
            from guiapp.checkpoints.samples import untrained_note
            from guiapp.inference.running import CAUSAL, perplexity, readable_text, sentence_pairs, similarities
            from guiapp.jobs.estimates import estimate_perplexity
            from guiapp.system.probe import cached_probe

            readable, note = readable_text(text, "text")
            if note:
                progress.log(note)
            plan = plan_try(references, device, dtype, probe_result)
            for line in plan.describe():
                progress.log(line)
            estimated = _log_estimate(estimate_perplexity(plan, text, probe_result or cached_probe()), progress)
            models_shelf = shelf or ModelShelf()
            results = []
            for index, (model_plan, source) in enumerate(zip(plan.models, _sources(plan, progress), strict=True)):
                _set_part(progress, index, len(plan.models))
                loaded = _load(model_plan, source, device, models_shelf, plan.together, progress)
                entry: dict[str, Any] = {"model": model_plan.reference, "kind": loaded.kind,
                                         "dtype": model_plan.run_dtype, "untrained": untrained_note(source.folder)}
                if loaded.kind == CAUSAL:
                    measured = perplexity(loaded, readable, window, progress)
                    entry.update(perplexity=measured.perplexity, tokens=measured.tokens)
                else:
                    pairs = sentence_pairs(readable)
                    if not pairs:
                        raise SettingsError(f"{model_plan.reference} is an encoder: it is compared on sentence "
                                            "pairs, and the text has none.", key="text",
                                            hint="Write pairs as two sentences on one line separated by a tab, or "
                                            "as consecutive lines.")
                    scores = similarities(loaded, pairs, progress)
                    entry.update(perplexity=None, similarities=scores, mean_similarity=sum(scores) / len(scores))
                results.append(entry)
            return {"results": results, **estimated}

        return Job(title=f"Perplexity of {plural(len(references), 'model')}", kind=self.kind, spec=self.to_dict(),
                   work=work)


def perplexity_job(references: list[str], text: str, *, shelf: ModelShelf | None = None, probe_result=None,
                   **settings: Any) -> Job:
    """A Perplexity job with `settings` (see `PerplexitySpec`)."""
    return PerplexitySpec(list(references), text, **settings).job(shelf, probe_result)


def read_sample_text(path: Path) -> str:
    """The text to measure perplexity on, from a .txt file or the "text" fields of a .jsonl file. Raises
    SettingsError for a file that is missing, too large, not UTF-8 or a .jsonl line without a "text" string.
    Imports torch: call it off the UI thread."""
    from guiapp.inference.running import read_text_file

    return read_text_file(path)


def publishable_folder(reference: str) -> Path | None:
    """The folder on this computer that publishing `reference` would share: its adapter's when it has one, else
    its own; None for a Hub model or a folder that is gone. Raises RecipeError for a reference that is not one."""
    from guiapp.hub.references import ModelRef

    ref = ModelRef.parse(reference)
    folder = (ref.adapter or ref).folder
    return folder if folder is not None and folder.is_dir() else None
