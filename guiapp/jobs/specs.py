"""Building jobs from settings: the same constructors serve the CLI and the window.

Each kind of job has one settings dataclass (a `JobSpec`) and one row in `JOB_KINDS`, the registry the history,
Retry and the pages read (what a kind is called, whether it makes a model, how its result is worded).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from guiapp.jobs import summaries
from guiapp.jobs.gguf_export import GgufExportSpec
from guiapp.jobs.lab import LabSpec
from guiapp.jobs.publish import PublishSpec
from guiapp.jobs.runner import Job, JobSpec, JobStatus
from guiapp.jobs.tryout import MAX_MODELS, PerplexitySpec, TrySpec
from guiapp.merging.recipe import Recipe, recipe_from_dict

# Which settings of a merge belong in its recipe rather than in the job's own settings.
RECIPE_SETTINGS = ("dtype", "out_dtype", "tokenizer_source")


@dataclass(frozen=True)
class MergeSpec(JobSpec):
    """A merge: `recipe` (the recipe's document) into `output`.

    Before any download or computation the job logs its estimate (memory, disk, time) and refuses to start,
    with the numbers, when it will not fit this machine, unless `force`. `compute_dtype` "recipe" computes in
    the recipe's dtype as mergekit does, refused (DeviceError) where the probe saw that dtype fail on `device`.
    `threads` caps the CPU threads of compute-bound work (None: every core other programs leave free).
    """

    kind: ClassVar[str] = "merge"
    recipe: dict[str, Any]
    output: str
    device: str = "cpu"
    seed: int = 0
    shard_bytes: int | None = None
    overwrite: bool = False
    force: bool = False
    compute_dtype: str = "float32"
    threads: int | None = None

    def job(self) -> Job:
        """Raises RecipeError when the recipe is no longer valid."""
        return _merge(recipe_from_dict(copy.deepcopy(self.recipe)), self)

    def with_setting(self, setting: str, value: Any) -> MergeSpec:
        if setting in RECIPE_SETTINGS:
            return replace(self, recipe={**self.recipe, setting: value})
        return super().with_setting(setting, value)

    def models_to_try(self, output: str | None) -> list[str]:
        from guiapp.errors import MergesmithError

        try:
            inputs = [str(ref) for ref in recipe_from_dict(dict(self.recipe)).model_refs()]
        except (MergesmithError, KeyError, TypeError):
            inputs = []
        return _at_most_four(inputs + [output] if output else inputs, output)


def merge_job(recipe: Recipe, output: Path, **settings: Any) -> Job:
    """A job that runs `recipe` into `output` with `settings` (see `MergeSpec`); its spec records every setting
    so it can be retried changed."""
    return _merge(recipe, MergeSpec(recipe.document, str(output), **settings))


def _merge(recipe: Recipe, spec: MergeSpec) -> Job:
    output = Path(spec.output)

    def work(progress):
        from guiapp.checkpoints.writing import DEFAULT_SHARD_BYTES
        from guiapp.merging.merge import MergeSettings, run_merge  # torch loads with the job
        from guiapp.system.threads import ThreadPolicy

        def check_fit(plan) -> None:
            estimated.update(_check_fit(checked_merge_estimate(plan, spec.device, output), progress, spec.force))

        estimated: dict[str, Any] = {}
        settings = MergeSettings(output, device=spec.device, seed=spec.seed,
                                 shard_bytes=spec.shard_bytes or DEFAULT_SHARD_BYTES, overwrite=spec.overwrite,
                                 compute_dtype=spec.compute_dtype, threads=ThreadPolicy(limit=spec.threads))
        return {**run_merge(recipe, settings, progress, before_start=check_fit).summary(), **estimated}

    return Job(title=f"Merge ({recipe.merge_method}) → {output.name}", kind=spec.kind, spec=spec.to_dict(), work=work)


def checked_merge_estimate(plan, device: str, output: Path, *, startup_seconds: float = 0.0):
    """The estimate of merging `plan` on `device` into `output` (a JobEstimate), after the checks of its settings a
    merge makes before it starts, the same for a run and a dry run: raises DeviceError for a device this machine
    does not have, or for a compute dtype the probe saw fail on it (`--compute-dtype recipe`), and OutputError /
    DeviceError when the destination's drive or the GPU cannot be examined."""
    from guiapp.compute.devices import resolve_device
    from guiapp.facts.dtypes import dtype_name
    from guiapp.jobs.estimates import estimate_merge
    from guiapp.system.capabilities import require_compute
    from guiapp.system.probe import cached_probe

    resolve_device(device)
    probe = cached_probe()
    if plan.compute_as_recipe and probe is not None:  # without a probe of this machine, nothing was seen to fail
        require_compute(probe, "merge", device, dtype_name(plan.compute_dtype))
    return estimate_merge(plan, device, output, probe, startup_seconds=startup_seconds)


@dataclass(frozen=True)
class ExtractSpec(JobSpec):
    """An extraction of a LoRA adapter of `model` against `base` into `output` (`threads` caps the CPU threads of
    the decompositions; None: every core other programs leave free).

    It logs its estimate first and refuses, with the numbers, an extraction that will not fit, unless `force`.
    """

    kind: ClassVar[str] = "extract"
    base: str
    model: str
    output: str
    rank_mode: str = "fixed"
    rank_value: float = 32
    max_rank: int | None = None
    solver: str = "randomized"
    include: str | None = None
    exclude: str | None = None
    embeddings: str = "save"
    dtype: str | None = None
    device: str = "cpu"
    compute_dtype: str = "float32"
    overwrite: bool = False
    force: bool = False
    threads: int | None = None

    def job(self) -> Job:
        return Job(title=f"Extract LoRA → {Path(self.output).name}", kind=self.kind, spec=self.to_dict(),
                   work=self._work)

    def models_to_try(self, output: str | None) -> list[str]:
        return _at_most_four([self.base, self.model, f"{self.base}+{output}" if output else None], output)

    def _work(self, progress) -> dict[str, Any]:
        from guiapp.checkpoints.sources import read_headers
        from guiapp.hub.references import ModelRef
        from guiapp.jobs.estimates import estimate_extraction
        from guiapp.lora.extract import ExtractionSettings, extract_lora  # torch
        from guiapp.lora.lowrank import RankRule
        from guiapp.system.probe import cached_probe
        from guiapp.system.threads import ThreadPolicy

        rule = RankRule(self.rank_mode, self.rank_value, self.max_rank)
        rank = int(self.rank_value) if self.rank_mode == "fixed" else (self.max_rank or 32)
        estimate = estimate_extraction(read_headers(ModelRef.parse(self.base)),
                                       read_headers(ModelRef.parse(self.model)), self.device, Path(self.output),
                                       cached_probe(), rank=rank, solver=self.solver, embeddings=self.embeddings,
                                       rule=rule)
        estimated = _check_fit(estimate, progress, self.force)

        settings = ExtractionSettings(
            base=self.base, model=self.model, out=Path(self.output), rule=rule, solver=self.solver,
            include=self.include, exclude=self.exclude, embeddings=self.embeddings, dtype=self.dtype,
            device=self.device, compute_dtype=self.compute_dtype, overwrite=self.overwrite,
            threads=ThreadPolicy(limit=self.threads),
        )
        return {**extract_lora(settings, progress), **estimated}


def extract_job(base: str, model: str, out: Path, **settings: Any) -> Job:
    """A job that extracts a LoRA adapter of `model` against `base` into `out` (see `ExtractSpec`)."""
    return ExtractSpec(base, model, str(out), **settings).job()


@dataclass(frozen=True)
class ApplySpec(JobSpec):
    """`base` with `adapter` applied, written as a full model folder at `output` (refused, with the numbers, when
    it will not fit, unless `force`; `threads` caps the CPU threads of the adapter's products)."""

    kind: ClassVar[str] = "apply"
    base: str
    adapter: str
    output: str
    scale: float = 1.0
    dtype: str | None = None
    device: str = "cpu"
    overwrite: bool = False
    max_shard_size: str = "5GB"
    force: bool = False
    threads: int | None = None

    def job(self) -> Job:
        return Job(title=f"Apply LoRA → {Path(self.output).name}", kind=self.kind, spec=self.to_dict(),
                   work=self._work)

    def models_to_try(self, output: str | None) -> list[str]:
        return _at_most_four([self.base, output], output)

    def _work(self, progress) -> dict[str, Any]:
        from guiapp.checkpoints.sources import read_headers
        from guiapp.hub.references import ModelRef
        from guiapp.jobs.estimates import estimate_apply
        from guiapp.lora.apply import ApplySettings, apply_lora  # torch
        from guiapp.system.probe import cached_probe
        from guiapp.system.threads import ThreadPolicy

        estimated = _check_fit(estimate_apply(read_headers(ModelRef.parse(self.base)), self.device,
                                              Path(self.output), cached_probe()), progress, self.force)

        settings = ApplySettings(base=self.base, adapter=self.adapter, out=Path(self.output), scale=self.scale,
                                 dtype=self.dtype, device=self.device, overwrite=self.overwrite,
                                 max_shard_size=self.max_shard_size, threads=ThreadPolicy(limit=self.threads))
        return {**apply_lora(settings, progress), **estimated}


def apply_job(base: str, adapter: str, out: Path, **settings: Any) -> Job:
    """A job that writes `base` with `adapter` applied as a full model folder at `out` (see `ApplySpec`)."""
    return ApplySpec(base, adapter, str(out), **settings).job()


@dataclass(frozen=True)
class DownloadSpec(JobSpec):
    """A download of what a merge needs of `repo_id` into the Hugging Face cache."""

    kind: ClassVar[str] = "download"
    repo_id: str
    revision: str | None = None

    def job(self) -> Job:
        return Job(title=f"Download {self.repo_id}", kind=self.kind, spec=self.to_dict(), work=self._work)

    def _work(self, progress) -> dict[str, Any]:
        from guiapp.hub.downloads import download_model

        return {"output": str(download_model(self.repo_id, self.revision, progress=progress))}


@dataclass(frozen=True)
class MoeSpec(JobSpec):
    """The mixture-of-experts model a mergekit-moe configuration describes, assembled into `output`: the
    configuration is the file `config_path` (the CLI) or `document`, its parsed form (the Experts page). Refused,
    with the numbers, when it will not fit, unless `force`."""

    kind: ClassVar[str] = "moe"
    config_path: str | None
    output: str
    document: dict[str, Any] | None = None
    device: str = "cpu"
    seed: int = 0
    overwrite: bool = False
    max_shard_size: str = "5GB"
    force: bool = False

    def job(self) -> Job:
        return Job(title=f"Assemble experts → {Path(self.output).name}", kind=self.kind, spec=self.to_dict(),
                   work=self._work)

    def models_to_try(self, output: str | None) -> list[str]:
        return _at_most_four([output], output)

    def _work(self, progress) -> dict[str, Any]:
        from guiapp.jobs.estimates import estimate_moe
        from guiapp.merging.recipe import recipe_yaml
        from guiapp.moe.assemble import MoeSettings, assemble_moe, plan_moe
        from guiapp.moe.config import load_moe_config, moe_config_from_dict
        from guiapp.system.probe import cached_probe

        progress.start_stage("Checking the experts against the base model")
        if self.document is not None:
            config, text = moe_config_from_dict(copy.deepcopy(self.document)), recipe_yaml(self.document)
        else:
            config, text = load_moe_config(Path(self.config_path))
        plan = plan_moe(config, self.device)
        estimated = _check_fit(estimate_moe(plan, Path(self.output), cached_probe()), progress, self.force)
        settings = MoeSettings(config, Path(self.output), device=self.device, seed=self.seed,
                               overwrite=self.overwrite, max_shard_size=self.max_shard_size, config_text=text)
        return {**assemble_moe(settings, progress, plan), **estimated}


def moe_job(config_path: Path | None, out: Path, **settings: Any) -> Job:
    """A job assembling the MoE model of the configuration file `config_path` (or `document=`, see `MoeSpec`)."""
    return MoeSpec(None if config_path is None else str(config_path), str(out), **settings).job()


@dataclass(frozen=True)
class ResizeSpec(JobSpec):
    """`adapter` resized to `rank`, or to the fewest directions keeping `energy` of each module, at `output`."""

    kind: ClassVar[str] = "lora-resize"
    adapter: str
    output: str
    rank: int | None = None
    energy: float | None = None
    overwrite: bool = False

    def job(self) -> Job:
        return Job(title=f"Resize LoRA → {Path(self.output).name}", kind=self.kind, spec=self.to_dict(),
                   work=self._work)

    def _work(self, progress) -> dict[str, Any]:
        from guiapp.lora.resize import ResizeSettings, resize_adapter  # torch

        return resize_adapter(ResizeSettings(self.adapter, Path(self.output), self.rank, self.energy,
                                             self.overwrite), progress)


def resize_job(adapter: str, out: Path, **settings: Any) -> Job:
    """A job that writes `adapter` resized (see `ResizeSpec`) at `out`."""
    return ResizeSpec(adapter, str(out), **settings).job()


@dataclass(frozen=True)
class CombineSpec(JobSpec):
    """The `method` combination of `adapters` with `weights` (PEFT's add_weighted_adapter) at `output`."""

    kind: ClassVar[str] = "lora-merge"
    adapters: list[str]
    weights: list[float]
    method: str
    output: str
    rank: int | None = None
    density: float | None = None
    overwrite: bool = False

    def job(self) -> Job:
        return Job(title=f"Combine LoRAs → {Path(self.output).name}", kind=self.kind, spec=self.to_dict(),
                   work=self._work)

    def _work(self, progress) -> dict[str, Any]:
        from guiapp.lora.combine import CombineSettings, combine_adapters  # torch

        settings = CombineSettings(tuple(self.adapters), tuple(self.weights), self.method, Path(self.output),
                                   self.rank, self.density, self.overwrite)
        return combine_adapters(settings, progress)


def combine_job(adapters: list[str], weights: list[float], method: str, out: Path, **settings: Any) -> Job:
    """A job that writes the `method` combination of `adapters` with `weights` (see `CombineSpec`) at `out`."""
    return CombineSpec(list(adapters), list(weights), method, str(out), **settings).job()


def download_job(repo_id: str, revision: str | None = None) -> Job:
    """A job that downloads what a merge needs of `repo_id` into the Hugging Face cache."""
    return DownloadSpec(repo_id, revision).job()


@dataclass(frozen=True)
class JobKind:
    """One kind of job: its name (a record's `kind`), what the Jobs list calls it, its settings class, whether its
    output is a model or adapter folder (listed in the library, offered to Try and to Publish), whether its end
    changes what is on disk, and how a finished job's summary is worded. `publishes_file`: its result is one file
    (the summary's "file", a GGUF file) that Publish offers to upload."""

    name: str
    words: str
    spec: type[JobSpec] | None  # None: a kind this version does not know
    makes_model: bool
    changes_disk: bool
    summary: Callable[[Mapping[str, Any]], str]
    publishes_file: bool = False


JOB_KINDS: dict[str, JobKind] = {kind.name: kind for kind in (
    JobKind("merge", "Merge", MergeSpec, True, True, summaries.merge_summary),
    JobKind("extract", "Extract LoRA", ExtractSpec, True, True, summaries.extraction_report),
    JobKind("apply", "Apply LoRA", ApplySpec, True, True, summaries.apply_summary),
    JobKind("lora-resize", "Resize LoRA", ResizeSpec, True, True, summaries.resize_summary),
    JobKind("lora-merge", "Combine LoRAs", CombineSpec, True, True, summaries.combine_summary),
    JobKind("moe", "Assemble experts", MoeSpec, True, True, summaries.moe_summary),
    JobKind("download", "Download", DownloadSpec, False, True, summaries.saved_summary),
    JobKind("export-gguf", "Export GGUF", GgufExportSpec, False, True, summaries.gguf_summary, publishes_file=True),
    JobKind("lab", "Merge lab", LabSpec, False, False, summaries.lab_summary),
    JobKind("try", "Try", TrySpec, False, False, summaries.try_summary),
    JobKind("perplexity", "Perplexity", PerplexitySpec, False, False, summaries.perplexity_summary),
    JobKind("publish", "Publish", PublishSpec, False, False, summaries.publish_summary),
)}


def job_kind(kind: str) -> JobKind:
    """The registry's row for `kind`. A kind this version does not know (a history written by a newer one) gets a
    row that makes nothing, is called by its name and words its summary plainly, so its record still shows."""
    return JOB_KINDS.get(kind) or JobKind(kind, kind, None, False, False, summaries.saved_summary)


def published_path(record) -> Path | None:
    """What Publish uploads for the job `record` (a JobRecord): a model-making job's output folder, an export's
    file; None while the job has not finished, or when its result is gone from the disk. Never raises."""
    row = job_kind(record.kind)
    if record.status != JobStatus.DONE:
        return None
    if row.publishes_file:
        file = record.summary.get("file")
        return Path(file) if isinstance(file, str) and Path(file).is_file() else None
    folder = Path(record.output) if row.makes_model and record.output else None
    return folder if folder is not None and folder.is_dir() else None


def spec_of(kind: str, spec: Mapping[str, Any]) -> JobSpec:
    """The typed settings of a saved spec (older key names read too). Raises ValueError for an unknown kind,
    TypeError when a required setting is missing."""
    settings = job_kind(kind).spec
    if settings is None:
        raise ValueError(f"unknown job kind {kind!r}")
    return settings.from_dict(spec)


def job_from_spec(kind: str, spec: Mapping[str, Any]) -> Job:
    """Rebuild a job from the spec it recorded (the Jobs page's Retry, and history after a restart).

    Raises RecipeError when the spec's recipe is no longer valid, ValueError for an unknown kind.
    """
    return spec_of(kind, spec).job()


def retry(kind: str, spec: Mapping[str, Any], changes: Mapping[str, Any]) -> Job:
    """The job `spec` describes with `changes` (a remedy's setting and value, or the window's own: another output
    folder, overwrite) applied. Settings the kind does not have change nothing (`force_download`: a retried job
    reads its files again anyway)."""
    settings = spec_of(kind, copy.deepcopy(dict(spec)))
    for setting, value in changes.items():
        settings = settings.with_setting(setting, value)
    return settings.job()


def models_to_try(kind: str, spec: Mapping[str, Any], output: str | None) -> list[str]:
    """What to compare after a finished job: its inputs, then its output (an adapter as `BASE+ADAPTER`), at most
    four, without repeats. Empty for a job kind that makes no model. Never raises: a spec it cannot read gives
    nothing."""
    try:
        return spec_of(kind, spec).models_to_try(output)
    except (ValueError, TypeError):
        return []


def _at_most_four(models: list[str | None], output: str | None) -> list[str]:
    unique = list(dict.fromkeys(m for m in models if m))
    return unique[-MAX_MODELS:] if output else unique[:MAX_MODELS]


def _check_fit(estimate, progress, force: bool) -> dict[str, Any]:
    """Log a job's estimate; refuse it (InsufficientResourcesError with the numbers) if it will not fit.

    Returns the time estimate as the job's summary keeps it (`estimate`: seconds, low, high, text; {} when the
    time is not known), so the window can show the estimate against the actual time when the job ends."""
    progress.log("Estimate: " + estimate.summary().replace("\n", "\n  "))
    if not estimate.fit.fits and not force:
        raise estimate.fit.as_error()
    from guiapp.jobs.estimates import summary_of_time

    return summary_of_time(estimate.time)
