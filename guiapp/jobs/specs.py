"""Building jobs from settings: the same constructors serve the CLI and the window."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from guiapp.engine.recipe import Recipe, recipe_from_dict
from guiapp.jobs.runner import Job


def merge_job(recipe: Recipe, output: Path, *, device: str = "cpu", seed: int = 0,
              shard_bytes: int | None = None, overwrite: bool = False, force: bool = False,
              compute_dtype: str = "float32", threads: int | None = None) -> Job:
    """A job that runs `recipe` into `output`; its spec records every setting so it can be retried changed.

    Before any download or computation the job logs its estimate (memory, disk, time) and refuses to start,
    with the numbers, when it will not fit this machine, unless `force`. `compute_dtype` "recipe" computes in
    the recipe's dtype as mergekit does, refused (DeviceError) where the probe saw that dtype fail on `device`.
    `threads` caps the CPU threads of compute-bound work (None: every core other programs leave free).
    """
    spec = {"recipe": recipe.document, "output": str(output), "device": device, "seed": seed,
            "shard_bytes": shard_bytes, "overwrite": overwrite, "force": force, "compute_dtype": compute_dtype,
            "threads": threads}

    def work(progress):
        from guiapp.engine.merge import MergeSettings, run_merge  # torch loads with the job
        from guiapp.engine.output import DEFAULT_SHARD_BYTES
        from guiapp.jobs.estimates import estimate_merge
        from guiapp.system.probe import cached_probe
        from guiapp.system.threads import ThreadPolicy

        def check_fit(plan) -> None:
            if plan.compute_as_recipe:
                from guiapp.engine.checkpoint import dtype_name
                from guiapp.system.capabilities import require_compute

                require_compute(cached_probe(), "merge", device, dtype_name(plan.compute_dtype))
            estimated.update(_check_fit(estimate_merge(plan, device, Path(output), cached_probe()), progress, force))

        estimated: dict[str, Any] = {}
        settings = MergeSettings(Path(output), device=device, seed=seed,
                                 shard_bytes=shard_bytes or DEFAULT_SHARD_BYTES, overwrite=overwrite,
                                 compute_dtype=compute_dtype, threads=ThreadPolicy(limit=threads))
        return {**run_merge(recipe, settings, progress, before_start=check_fit).summary(), **estimated}

    return Job(title=f"Merge ({recipe.merge_method}) → {Path(output).name}", kind="merge", spec=spec, work=work)


def extract_job(base: str, model: str, out: Path, *, rank_mode: str = "fixed", rank_value: float = 32,
                max_rank: int | None = None, solver: str = "randomized", include: str | None = None,
                exclude: str | None = None, embeddings: str = "save", dtype: str | None = None,
                device: str = "cpu", compute_dtype: str = "float32", overwrite: bool = False,
                force: bool = False, threads: int | None = None) -> Job:
    """A job that extracts a LoRA adapter of `model` against `base` into `out` (`threads` caps the CPU threads of
    the decompositions; None: every core other programs leave free).

    It logs its estimate first and refuses, with the numbers, an extraction that will not fit, unless `force`.
    """
    spec = {"base": base, "model": model, "out": str(out), "rank_mode": rank_mode, "rank_value": rank_value,
            "max_rank": max_rank, "solver": solver, "include": include, "exclude": exclude,
            "embeddings": embeddings, "dtype": dtype, "device": device, "compute_dtype": compute_dtype,
            "overwrite": overwrite, "force": force, "threads": threads}

    def work(progress):
        from guiapp.engine.lora_extract import ExtractionSettings, extract_lora  # torch
        from guiapp.engine.lowrank import RankRule
        from guiapp.engine.sources import read_headers
        from guiapp.hub.references import ModelRef
        from guiapp.jobs.estimates import estimate_extraction
        from guiapp.system.probe import cached_probe
        from guiapp.system.threads import ThreadPolicy

        rank = int(rank_value) if rank_mode == "fixed" else (max_rank or 32)
        estimate = estimate_extraction(read_headers(ModelRef.parse(base)), read_headers(ModelRef.parse(model)),
                                       device, Path(out), cached_probe(), rank=rank, solver=solver,
                                       embeddings=embeddings, rule=RankRule(rank_mode, rank_value, max_rank))
        estimated = _check_fit(estimate, progress, force)

        settings = ExtractionSettings(
            base=base, model=model, out=Path(out), rule=RankRule(rank_mode, rank_value, max_rank), solver=solver,
            include=include, exclude=exclude, embeddings=embeddings, dtype=dtype, device=device,
            compute_dtype=compute_dtype, overwrite=overwrite, threads=ThreadPolicy(limit=threads),
        )
        return {**extract_lora(settings, progress), **estimated}

    return Job(title=f"Extract LoRA → {Path(out).name}", kind="extract", spec=spec, work=work)


def apply_job(base: str, adapter: str, out: Path, *, scale: float = 1.0, dtype: str | None = None,
              device: str = "cpu", overwrite: bool = False, max_shard_size: str = "5GB", force: bool = False,
              threads: int | None = None) -> Job:
    """A job that writes `base` with `adapter` applied as a full model folder at `out` (refused, with the
    numbers, when it will not fit, unless `force`; `threads` caps the CPU threads of the adapter's products)."""
    spec = {"base": base, "adapter": adapter, "out": str(out), "scale": scale, "dtype": dtype, "device": device,
            "overwrite": overwrite, "max_shard_size": max_shard_size, "force": force, "threads": threads}

    def work(progress):
        from guiapp.engine.lora_apply import ApplySettings, apply_lora  # torch
        from guiapp.engine.sources import read_headers
        from guiapp.hub.references import ModelRef
        from guiapp.jobs.estimates import estimate_apply
        from guiapp.system.probe import cached_probe
        from guiapp.system.threads import ThreadPolicy

        estimated = _check_fit(estimate_apply(read_headers(ModelRef.parse(base)), device, Path(out), cached_probe()),
                               progress, force)

        settings = ApplySettings(base=base, adapter=adapter, out=Path(out), scale=scale, dtype=dtype,
                                 device=device, overwrite=overwrite, max_shard_size=max_shard_size,
                                 threads=ThreadPolicy(limit=threads))
        return {**apply_lora(settings, progress), **estimated}

    return Job(title=f"Apply LoRA → {Path(out).name}", kind="apply", spec=spec, work=work)


def download_job(repo_id: str, revision: str | None = None) -> Job:
    """A job that downloads what a merge needs of `repo_id` into the Hugging Face cache."""
    spec = {"repo_id": repo_id, "revision": revision}

    def work(progress):
        from guiapp.hub.downloads import download_model

        return {"output": str(download_model(repo_id, revision, progress=progress))}

    return Job(title=f"Download {repo_id}", kind="download", spec=spec, work=work)


def job_from_spec(kind: str, spec: dict[str, Any]) -> Job:
    """Rebuild a job from the spec it recorded (the Jobs page's Retry, and history after a restart).

    Raises RecipeError when the spec's recipe is no longer valid, ValueError for an unknown kind.
    """
    if kind == "merge":
        return merge_job(recipe_from_dict(copy.deepcopy(spec["recipe"])), Path(spec["output"]),
                         device=spec.get("device", "cpu"), seed=spec.get("seed", 0),
                         shard_bytes=spec.get("shard_bytes"), overwrite=spec.get("overwrite", False),
                         force=spec.get("force", False), compute_dtype=spec.get("compute_dtype", "float32"),
                         threads=spec.get("threads"))
    if kind == "extract":
        return extract_job(**{**spec, "out": Path(spec["out"])})
    if kind == "apply":
        return apply_job(**{**spec, "out": Path(spec["out"])})
    if kind == "download":
        return download_job(spec["repo_id"], spec.get("revision"))
    if kind == "export-gguf":
        from guiapp.jobs.gguf_export import gguf_export_job

        return gguf_export_job(**spec)
    if kind in ("try", "perplexity", "publish"):
        from guiapp.jobs.publish import publish_job
        from guiapp.jobs.tryout import perplexity_job, try_job

        if kind == "publish":
            return publish_job(Path(spec["folder"]), spec["repo_id"], private=spec["private"], card=spec["card"],
                               any_folder=spec.get("any_folder", False))
        references = spec["references"]
        rest = {key: value for key, value in spec.items() if key != "references"}
        return (try_job if kind == "try" else perplexity_job)(references, **rest)
    raise ValueError(f"unknown job kind {kind!r}")


# Which retry_with keys belong in a merge's recipe rather than in the job's own settings.
_RECIPE_KEYS = ("dtype", "out_dtype", "tokenizer_source")


def retry(kind: str, spec: dict[str, Any], changes: dict[str, Any]) -> Job:
    """The job `spec` describes with an Explanation's `retry_with` changes applied.

    Changes name job settings (device, output, overwrite…) or, for merges, recipe keys (dtype, out_dtype,
    tokenizer_source). `force_download` needs nothing more here: a retried job reads its files again.
    """
    spec = copy.deepcopy(spec)
    for key, value in changes.items():
        if key == "output" and "out" in spec:  # extractions and applications name their output folder "out"
            key = "out"
        if kind == "merge" and key in _RECIPE_KEYS:
            spec["recipe"][key] = value
        elif key in spec:
            spec[key] = value
    return job_from_spec(kind, spec)


def _check_fit(estimate, progress, force: bool) -> dict[str, Any]:
    """Log a job's estimate; refuse it (InsufficientResourcesError with the numbers) if it will not fit.

    Returns the time estimate as the job's summary keeps it (`estimate`: seconds, low, high, text; {} when the
    time is not known), so the window can show the estimate against the actual time when the job ends."""
    progress.log("Estimate: " + estimate.summary().replace("\n", "\n  "))
    if not estimate.fit.fits and not force:
        raise estimate.fit.as_error()
    from guiapp.jobs.estimates import summary_of_time

    return summary_of_time(estimate.time)
