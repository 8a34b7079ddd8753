"""docs/recipes.md: its method reference is what the methods declare, and its worked examples really merge."""

from __future__ import annotations

import json
import re
import runpy
import sys

import pytest

from docs.recipes_reference import DOCUMENT, with_generated_part
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.methods import METHODS
from guiapp.merging.recipe import parse_recipe
from tests.engine.helpers import load_folder

EXAMPLE = re.compile(r"```yaml\n# example: (?P<name>\w+)\n(?P<text>.*?)```", re.DOTALL)


def _examples() -> dict[str, str]:
    return {found["name"]: found["text"] for found in EXAMPLE.finditer(DOCUMENT.read_text(encoding="utf-8"))}


def test_the_method_reference_is_what_the_generator_writes(monkeypatch):
    document = DOCUMENT.read_text(encoding="utf-8")
    assert with_generated_part(document) == document, "run `python docs/recipes_reference.py`"
    # The script as `python docs/recipes_reference.py --check` runs it (as __main__, its exit code), in this process.
    monkeypatch.setattr(sys, "argv", ["recipes_reference.py", "--check"])
    monkeypatch.setattr(sys, "path", [*sys.path])  # the script puts the checkout first on the path: not for the others
    with pytest.raises(SystemExit) as check:
        runpy.run_path(str(DOCUMENT.parent / "recipes_reference.py"), run_name="__main__")
    assert check.value.code == 0


def test_every_method_and_parameter_is_documented():
    document = DOCUMENT.read_text(encoding="utf-8")
    for method in METHODS.values():
        section = document[document.index(f"\n### {method.name}\n"):]
        section = section[:section.find("\n### ", 1)]
        for param in method.params:
            assert f"| `{param.name}` |" in section, (method.name, param.name)


def test_there_are_three_worked_examples():
    assert sorted(_examples()) == ["passthrough", "slerp", "ties"]


@pytest.mark.parametrize("name", ["ties", "slerp", "passthrough"])
def test_each_worked_example_merges(name, llama_trio, tmp_path):
    base, math_tune, chat_tune = llama_trio
    text = _examples()[name]
    for placeholder, folder in (("./base", base), ("./math-tune", math_tune), ("./chat-tune", chat_tune)):
        text = text.replace(placeholder, str(folder))
    recipe = parse_recipe(text)
    assert not recipe.warnings
    outcome = run_merge(recipe, MergeSettings(tmp_path / "merged"))
    assert not outcome.plan.warnings
    merged = load_folder(outcome.output)
    inputs = load_folder(base)
    layers = json.loads((outcome.output / "config.json").read_text())["num_hidden_layers"]
    if name == "passthrough":  # layers 0-1 of the base, then 1-2 of the math fine-tune
        assert layers == 4
        assert merged["model.layers.2.mlp.up_proj.weight"].equal(
            load_folder(math_tune)["model.layers.1.mlp.up_proj.weight"])
    else:
        assert layers == 3 and merged.keys() == inputs.keys()
        assert not merged["model.layers.1.mlp.up_proj.weight"].equal(inputs["model.layers.1.mlp.up_proj.weight"])
