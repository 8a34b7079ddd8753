"""One model-reference type, read by one parser: a recipe, the CLI's Hub commands, the publish card and the output
names all get the same answer for the same text, and a recipe writes the reference back as it was written."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from guiapp.hub.publish_card import RECIPE_FILE, base_models
from guiapp.hub.references import ModelRef
from guiapp.jobs.naming import input_name
from guiapp.merging.recipe import parse_recipe

ROOT = Path(__file__).resolve().parents[2]

# text → (model, revision, adapter as text, local folder?)
TRICKY = {
    "org/model@v1.0": ("org/model", "v1.0", None, False),
    "org/name@feature@2": ("org/name", "feature@2", None, False),  # repo ids never hold "@"; branch names may
    "./folder@weird": ("./folder@weird", None, None, True),  # not a Hub id before the "@": a path, "@" and all
    "org/model+org/adapter@rev": ("org/model", None, "org/adapter@rev", False),
    "org/model@v2+./adapters/a": ("org/model", "v2", "./adapters/a", False),
    "C:\\models\\tiny@v2": ("C:\\models\\tiny@v2", None, None, True),
    "D:/models/tiny": ("D:/models/tiny", None, None, True),
    "~/x": ("~/x", None, None, True),
    "gpt2": ("gpt2", None, None, False),
}


def _meaning(ref: ModelRef) -> tuple:
    return ref.model, ref.revision, str(ref.adapter) if ref.adapter else None, ref.is_local


@pytest.fixture
def in_folder(tmp_path, monkeypatch):
    """Relative references are read against a folder holding `tiny@v2` and `chat+code` model folders (names that
    would read as a revision and an adapter if they did not exist)."""
    for name in ("tiny@v2", "chat+code"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _recipe_refs(text: str) -> list[ModelRef]:
    """The reference as the recipe parser reads it in each place a recipe names a model."""
    recipe = parse_recipe(yaml.safe_dump({"merge_method": "task_arithmetic", "base_model": text,
                                          "models": [{"model": text, "parameters": {"weight": 1.0}}]}))
    slices = parse_recipe(yaml.safe_dump({"merge_method": "linear", "slices": [
        {"sources": [{"model": text, "layer_range": [0, 2], "parameters": {"weight": 1.0}}]}]}))
    return [recipe.base_model, recipe.models[0].model, slices.slices[0].sources[0].model]


@pytest.mark.parametrize("text", list(TRICKY))
def test_one_reading_of_a_tricky_reference_everywhere(in_folder, text):
    ref = ModelRef.parse(text)
    assert _meaning(ref) == TRICKY[text]
    assert all(found == ref for found in _recipe_refs(text))
    assert str(ref) == text  # written back exactly as mergekit's syntax had it
    assert ref.hub_id == (None if ref.is_local else ref.model)
    folder = Path(text).expanduser().resolve()
    assert ref.folder == (folder if ref.is_local else None)
    if ref.adapter is not None:
        assert ref.base == ModelRef.parse(text.rpartition("+")[0])


def test_existing_folders_are_taken_whole(in_folder):
    for name in ("tiny@v2", "chat+code", str(in_folder / "tiny@v2"), "./chat+code"):
        ref = ModelRef.parse(name)
        assert (ref.model, ref.revision, ref.adapter) == (name, None, None)
        assert ref.existing_folder() == (in_folder / Path(name).name).resolve()
    # An existing folder may still carry an adapter: the text after the last "+".
    with_adapter = ModelRef.parse("chat+code+org/adapter")
    assert (with_adapter.model, with_adapter.adapter) == ("chat+code", ModelRef("org/adapter"))


def test_the_publish_card_and_output_names_read_references_alike(in_folder):
    output = in_folder / "output"
    output.mkdir()
    (output / RECIPE_FILE).write_text(yaml.safe_dump({
        "merge_method": "ties", "base_model": "org/base@v1",
        "models": [{"model": "tiny@v2"}, {"model": "org/chat+org/adapter@rev"}, {"model": "C:\\m\\x@y"}],
    }))
    # Local folders are not Hub bases; a Hub model is named without its revision or adapter.
    assert base_models(output) == ["org/chat", "org/base"]
    assert [input_name(text) for text in ("tiny@v2", "org/tiny@v2", "org/chat+org/adapter@rev")] \
        == ["tiny-v2", "tiny", "chat"]


def test_columns_and_charts_name_a_model_by_the_same_reading(in_folder):
    """The Try page's short names: an existing folder named `chat+code` is one model, not `code` applied to `chat`."""
    assert [ModelRef.parse(text).short_name for text in ("chat+code", "org/model+org/adapter@rev", "./out/x/",
                                                          "org/model@v1", "~/models/tiny")] \
        == ["chat+code", "adapter@rev", "x", "model@v1", "tiny"]


def test_mergekit_long_form_is_the_same_reference():
    assert ModelRef.parse({"model": "org/a@v1", "lora": "org/b@r"}) == ModelRef.parse("org/a@v1+org/b@r")


def _classes_with_model_fields(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ClassDef) and ("Ref" in node.name or "Reference" in node.name):
            fields = {item.target.id for item in node.body
                      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
            if fields & {"model", "revision", "repo_id", "adapter", "folder"}:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return found


def test_there_is_one_model_reference_type():
    classes = [found for folder in ("guiapp", "benchmarks", "tests") for path in sorted((ROOT / folder).rglob("*.py"))
               for found in _classes_with_model_fields(path)]
    assert classes == [f"guiapp/hub/references.py:{_line_of_model_ref()} ModelRef"]


def _line_of_model_ref() -> int:
    tree = ast.parse((ROOT / "guiapp/hub/references.py").read_text(encoding="utf-8"))
    return next(node.lineno for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ModelRef")


@pytest.mark.parametrize("link", ["loop", "broken"])
def test_a_link_that_never_reaches_a_folder_is_said_for_what_it_is(tmp_path, link):
    """A link to itself made pathlib raise RuntimeError ("Symlink loop"), shown as "not recognised"."""
    from guiapp.errors import CheckpointError
    from guiapp.hub.references import ModelRef

    path = tmp_path / "model"
    path.symlink_to(path if link == "loop" else tmp_path / "gone")
    reference = ModelRef.parse(str(path))
    with pytest.raises(CheckpointError, match="is a link that does not lead to a folder"):
        reference.existing_folder()
