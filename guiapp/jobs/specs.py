"""Building jobs from settings: the same constructors serve the CLI and the window."""

from __future__ import annotations

from pathlib import Path

from guiapp.engine.recipe import Recipe
from guiapp.jobs.runner import Job


def merge_job(recipe: Recipe, output: Path, *, device: str = "cpu", seed: int = 0,
              shard_bytes: int | None = None, overwrite: bool = False) -> Job:
    """A job that runs `recipe` into `output`; its spec records every setting so it can be retried changed."""
    spec = {"recipe": recipe.document, "output": str(output), "device": device, "seed": seed,
            "shard_bytes": shard_bytes, "overwrite": overwrite}

    def work(progress):
        from guiapp.engine.merge import MergeSettings, run_merge  # noqa: PLC0415 - torch loads with the job
        from guiapp.engine.output import DEFAULT_SHARD_BYTES  # noqa: PLC0415

        settings = MergeSettings(Path(output), device=device, seed=seed,
                                 shard_bytes=shard_bytes or DEFAULT_SHARD_BYTES, overwrite=overwrite)
        return run_merge(recipe, settings, progress).summary()

    return Job(title=f"Merge ({recipe.merge_method}) → {Path(output).name}", kind="merge", spec=spec, work=work)
