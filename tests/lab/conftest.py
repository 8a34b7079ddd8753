from __future__ import annotations

import pytest
import yaml

from tests.lab.models import Planted, write_planted
from tests.support.warm_cli import warm_cli  # noqa: F401 - the CLI cases use it


@pytest.fixture(scope="session")
def planted(tmp_path_factory) -> Planted:
    return write_planted(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="session")
def recipe(planted: Planted, tmp_path_factory):
    """task_arithmetic of the two fine-tunes at 0.5 each (the start the lab must beat)."""
    path = tmp_path_factory.mktemp("recipe") / "recipe.yml"
    path.write_text(yaml.safe_dump({
        "merge_method": "task_arithmetic", "base_model": str(planted.base), "dtype": "float32",
        "models": [{"model": str(planted.animals), "parameters": {"weight": 0.5}},
                   {"model": str(planted.computers), "parameters": {"weight": 0.5}}],
    }))
    return path
