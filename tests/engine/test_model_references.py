"""One reading of a model reference: the recipe's ModelRef and the Hub's reference parser agree."""

from __future__ import annotations

import pytest

from guiapp.engine.recipe import ModelRef
from guiapp.hub.references import parse_reference


@pytest.mark.parametrize(("text", "repo", "revision"), [
    ("org/name", "org/name", None),
    ("org/name@v1.0", "org/name", "v1.0"),
    ("org/name@feature@2", "org/name", "feature@2"),  # repo ids never hold "@"; branch names may
])
def test_recipe_and_hub_split_a_revision_alike(text, repo, revision):
    ref, reference = ModelRef.parse(text), parse_reference(text)
    assert (ref.model, ref.revision) == (reference.repo_id, reference.revision) == (repo, revision)


def test_an_existing_folder_with_an_at_sign_is_a_folder_for_both(tmp_path):
    folder = tmp_path / "models@home"
    folder.mkdir()
    ref, reference = ModelRef.parse(str(folder)), parse_reference(str(folder))
    assert ref.is_local and ref.revision is None and reference.folder == folder.resolve()
