"""Mergesmith's errors are catchable by meaning (the standard exception that fits) and carry the key they concern."""

from __future__ import annotations

import pytest

from guiapp.errors import (
    CheckpointError,
    ConnectionLostError,
    GatedModelError,
    HubError,
    IncompatibleModelsError,
    ModelNotFoundError,
    OfflineError,
    RecipeError,
    RevisionNotFoundError,
    SettingsError,
    key_path,
)
from guiapp.hub.headers import read_file_header
from guiapp.lora.lowrank import RankRule
from guiapp.merging.recipe import recipe_from_dict


@pytest.mark.parametrize(
    ("error", "meaning"),
    [
        (RecipeError("bad"), ValueError),
        (SettingsError("bad"), ValueError),
        (CheckpointError("bad"), ValueError),
        (HubError("bad"), OSError),
        (OfflineError("bad"), ConnectionError),
        (ConnectionLostError("bad"), ConnectionError),
        (ModelNotFoundError("bad"), FileNotFoundError),
        (RevisionNotFoundError("bad"), FileNotFoundError),
        (GatedModelError("bad"), PermissionError),
    ],
)
def test_errors_are_caught_by_meaning(error, meaning):
    with pytest.raises(meaning) as caught:
        raise error
    assert str(caught.value) == "bad"  # the message stays the user-facing text, whatever the base


def test_a_bad_file_is_not_an_os_error_so_os_error_handlers_do_not_rewrap_it(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(CheckpointError) as caught:
        read_file_header(path)
    assert not isinstance(caught.value, OSError)
    assert "cannot be read:" not in caught.value.message  # the OSError handler around the read did not wrap it


def test_settings_and_recipe_errors_are_different_classes():
    assert not issubclass(SettingsError, RecipeError) and not issubclass(RecipeError, SettingsError)
    assert not issubclass(IncompatibleModelsError, ValueError)


def test_a_lora_setting_error_names_the_setting():
    with pytest.raises(SettingsError) as caught:
        RankRule("fixed", 0).validate()
    assert caught.value.key == ("rank",)
    with pytest.raises(SettingsError) as caught:
        RankRule("energy", 2.0).validate()
    assert caught.value.key == ("rank",)


@pytest.mark.parametrize(
    ("document", "key"),
    [
        ({"models": [{"model": "a/b"}]}, ("merge_method",)),
        ({"merge_method": "nonsense_method", "models": [{"model": "a/b"}]}, ("merge_method",)),
        ({"merge_method": "linear"}, ("models",)),
        ({"merge_method": "linear", "models": [{"model": "a/b"}, {"weight": 1}]}, ("models", 1)),
        ({"merge_method": "linear", "models": [{"model": "a/b", "parameters": 3}]}, ("models", 0, "parameters")),
        ({"merge_method": "linear", "slices": [{"sources": [{"model": "a/b", "layer_range": [4, 2]}]}]},
         ("slices", 0, "sources", 0, "layer_range")),
        ({"merge_method": "linear", "models": [{"model": "a/b"}], "out_dtype": "int3"}, ("out_dtype",)),
    ],
)
def test_a_recipe_error_names_its_key(document, key):
    from guiapp.merging.methods import get_method

    with pytest.raises(RecipeError) as caught:
        recipe = recipe_from_dict(document)
        get_method(recipe.merge_method)
    assert caught.value.key == key


def test_key_paths_are_read_from_text():
    assert key_path("models[1].parameters.weight") == ("models", 1, "parameters", "weight")
    assert key_path("rank") == ("rank",)
    assert key_path(None) == ()
    assert key_path(("slices", 0)) == ("slices", 0)
