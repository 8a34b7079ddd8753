"""The models "Try it" compares: the recipe searched and the best one, merged into the lab's folder once, merged
again when a recipe changed, and a folder the user put there never replaced."""

from __future__ import annotations

import pytest
import yaml

from guiapp.errors import OutputError
from guiapp.jobs.lab_try import try_merges
from guiapp.progress import Progress


def _recipe(planted, first: float, second: float) -> dict:
    return {"merge_method": "task_arithmetic", "base_model": str(planted.base), "dtype": "float32",
            "models": [{"model": str(planted.animals), "parameters": {"weight": first}},
                       {"model": str(planted.computers), "parameters": {"weight": second}}]}


@pytest.mark.long
def test_each_recipe_is_merged_once_again_when_it_changed_and_a_users_folder_is_kept(planted, tmp_path):
    start, best = _recipe(planted, 0.5, 0.5), _recipe(planted, 0.7, 0.3)
    merges = try_merges(start, best, tmp_path)
    assert [m.folder for m in merges] == [tmp_path / "start-model", tmp_path / "best-model"]
    merges[0].job.work(Progress())
    merges[1].job.work(Progress())
    assert [m.job for m in try_merges(start, best, tmp_path)] == [None, None]

    better = _recipe(planted, 0.8, 0.2)
    again = try_merges(start, better, tmp_path)
    assert again[0].job is None and again[1].job is not None
    again[1].job.work(Progress())  # the earlier best's merge is replaced by the new best's
    written = yaml.safe_load((tmp_path / "best-model" / "mergesmith_recipe.yml").read_text())
    assert [m["parameters"]["weight"] for m in written["models"]] == [0.8, 0.2]

    (tmp_path / "start-model").rename(tmp_path / "elsewhere")
    (tmp_path / "start-model").mkdir()
    (tmp_path / "start-model" / "notes.txt").write_text("mine")
    mine = try_merges(start, better, tmp_path)[0]
    assert mine.job is not None
    with pytest.raises(OutputError):
        mine.job.work(Progress())
    assert [p.name for p in (tmp_path / "start-model").iterdir()] == ["notes.txt"]
