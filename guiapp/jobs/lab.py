"""The merge lab as a job (the CLI's `mergesmith lab` and the window's Lab page run it the same way)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from guiapp.jobs.runner import Job, JobSpec


@dataclass(frozen=True)
class LabSpec(JobSpec):
    """One search (see `guiapp.lab.search.LabSettings`, whose `out` is `output` here), paths as text."""

    kind: ClassVar[str] = "lab"
    recipe: str
    text: str
    trials: int
    output: str
    seed: int = 0
    engine: str = "local"
    ray_address: str | None = None
    holdout: float = 0.0
    tune: str | None = None
    window: int = 512
    device: str = "cpu"
    prompts: str | None = None

    def job(self, on_trial: Callable[[Any], None] | None = None) -> Job:
        """A job running `guiapp.lab.search.run_lab`; `on_trial` hears each trial as it is recorded, on the job's
        thread. The summary is `LabRun.summary()`."""

        def work(progress) -> dict[str, Any]:
            from guiapp.lab.search import LabSettings, run_lab

            settings = LabSettings(
                recipe=Path(self.recipe), text=Path(self.text), trials=self.trials, out=Path(self.output),
                seed=self.seed, engine=self.engine, ray_address=self.ray_address, holdout=self.holdout,
                tune=self.tune, window=self.window, device=self.device,
                prompts=Path(self.prompts) if self.prompts else None)
            return run_lab(settings, progress, on_trial).summary()

        return Job(title=f"Merge lab: {self.trials} trials", kind=self.kind, spec=self.to_dict(), work=work)


def lab_job(spec: Mapping[str, Any], on_trial: Callable[[Any], None] | None = None) -> Job:
    """A lab job with the settings `spec` holds (LabSettings' fields; paths as paths or text)."""
    return LabSpec.from_dict({key: str(value) if isinstance(value, Path) else value
                              for key, value in spec.items()}).job(on_trial)


def lab_tunables(document: dict[str, Any]) -> list[Any]:
    """The numbers of the recipe `document` the lab can tune, each with its range (guiapp.lab.space.Tunable).
    Raises RecipeError / SettingsError for a recipe that is not valid or has nothing to tune."""
    from guiapp.lab.space import tunables

    return tunables(document)


def tunable_words(document: Mapping[str, Any], tunable: Any) -> str:
    """How the window names one of `document`'s tunable numbers (a Tunable): the parameter's label, the model it
    belongs to by its short name, the point of a per-layer curve and the tensors it applies to — "tiny-math: Weight,
    point 2 of 3" where the recipe says `models[0].parameters.weight[1]`, "(self_attn)" or "(the rest)" for a
    filtered value."""
    from guiapp.jobs.naming import input_name
    from guiapp.jobs.plain_words import parameter_label
    from guiapp.merging.method_declarations import DECLARATIONS

    declaration = DECLARATIONS.get(str(document.get("merge_method", "")))
    spec = declaration.param(tunable.parameter) if declaration is not None else None
    words = parameter_label(spec) if spec is not None else tunable.parameter
    owner = where = kind = ""
    place: Any = document
    for index, step in enumerate(tunable.path):
        if isinstance(place, Mapping) and step == "parameters" and isinstance(place.get("model"), str):
            owner = f"{input_name(place['model'])}: "
        elif isinstance(place, Mapping) and step == "value":
            kind = f" ({place['filter']})" if place.get("filter") else " (the rest)"
        elif isinstance(place, list) and index == len(tunable.path) - 1 and len(place) > 1:
            where = f", point {step + 1} of {len(place)}"  # of a per-layer curve
        place = place[step]
    return f"{owner}{words}{where}{kind}"


def recipe_with_values(document: dict[str, Any], tunables: list[Any], values: Mapping[str, float]) -> dict[str, Any]:
    """`document` with the tuned numbers set to `values` (a trial's), as a recipe the Merge page can load."""
    from guiapp.lab.space import with_values

    return with_values(document, tunables, values)


def recipe_document(path: Path) -> dict[str, Any]:
    """The recipe mapping in the YAML file `path`. Raises RecipeError for a file that is not a valid recipe."""
    from guiapp.merging.recipe import load_recipe

    return load_recipe(Path(path)).document


def write_recipe(document: dict[str, Any], path: Path) -> None:
    """Write the recipe `document` as YAML at `path` (its folder made first). Raises OSError when it cannot."""
    from guiapp.merging.recipe import recipe_yaml

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(recipe_yaml(document))
