"""The lab's "Try it": the recipe a search started from and the best one it found, merged into folders of the lab's
own folder (reused while they hold that very merge), for the Try page to compare."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guiapp.jobs.runner import Job
from guiapp.jobs.specs import merge_job

# The lab folder's sub-folders that hold the two models "Try it" compares: the recipe as given, the best found.
TRY_FOLDERS = ("start-model", "best-model")


@dataclass(frozen=True)
class TryMerge:
    """One model to try: its folder, and the merge job that makes it (None when the folder already holds the
    finished merge of this very recipe, so it is reused)."""

    folder: Path
    job: Job | None


def try_merges(start: dict[str, Any], best: dict[str, Any], lab_folder: Path) -> list[TryMerge]:
    """The recipe as given and the best candidate, each as a model in a folder of `lab_folder` (`TRY_FOLDERS`),
    merged as `mergesmith merge` would. A folder holding an earlier merge of the same recipe is reused; any other
    earlier Mergesmith merge there is replaced by the job, and a folder Mergesmith did not write makes the job
    fail with the output rule's message (nothing of the user's is replaced). Raises RecipeError for a recipe
    that is not valid."""
    from guiapp.merging.recipe import recipe_from_dict

    merges = []
    for document, name in zip((start, best), TRY_FOLDERS, strict=True):
        recipe = recipe_from_dict(copy.deepcopy(document))
        folder = Path(lab_folder) / name
        reused = _holds_merge_of(folder, recipe.document)
        merges.append(TryMerge(folder, None if reused else merge_job(recipe, folder, overwrite=True)))
    return merges


def _holds_merge_of(folder: Path, document: dict[str, Any]) -> bool:
    """Whether `folder` is a finished Mergesmith merge of the recipe `document`, every file its marker lists still
    there (the marker is written last, so a cancelled or failed merge never counts)."""
    from guiapp.checkpoints.output_guard import read_marker
    from guiapp.errors import MergesmithError
    from guiapp.merging.recipe import load_recipe

    previous = read_marker(folder)
    if previous is None or previous.kind != "merge" or not all((folder / f).is_file() for f in previous.files):
        return False
    try:
        return load_recipe(folder / "mergesmith_recipe.yml").document == document
    except MergesmithError:
        return False
