"""`modules:` of a LLaVA-style model: the language model and the vision tower merged with their own lists and
parameters, the projector (named by no module) copied from the base; config layer counts per module."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from guiapp.errors import RecipeError
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.recipe import parse_recipe
from tests.engine.helpers import load_folder
from tests.recipes.models import write_llava


@pytest.fixture(scope="module")
def llavas(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llava")
    return write_llava(folder / "a", 1), write_llava(folder / "b", 2)


def test_language_model_and_vision_tower_merged_separately(llavas, tmp_path):
    a, b = llavas
    recipe = parse_recipe(f"""merge_method: linear
base_model: {a}
parameters: {{weight: 1.0}}
modules:
  text_decoder:
    models:
      - model: {a}
        parameters: {{weight: 0.3}}
      - model: {b}
        parameters: {{weight: 0.7}}
  vision_tower:
    slices:
      - sources:
          - model: {b}
            layer_range: [1, 2]
""")
    out = run_merge(recipe, MergeSettings(tmp_path / "out")).output
    merged, ta, tb = load_folder(out), load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    for name in ("language_model.model.layers.3.mlp.up_proj.weight", "language_model.lm_head.weight",
                 "language_model.model.embed_tokens.weight"):
        assert torch.allclose(merged[name], 0.3 * ta[name] + 0.7 * tb[name], atol=1e-6)
    # The vision tower is b's layer 1 alone, renumbered 0; its embeddings and final norm are b's.
    assert torch.equal(merged["vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight"],
                       tb["vision_tower.vision_model.encoder.layers.1.mlp.fc1.weight"])
    assert "vision_tower.vision_model.encoder.layers.1.mlp.fc1.weight" not in merged
    assert torch.equal(merged["vision_tower.vision_model.post_layernorm.weight"],
                       tb["vision_tower.vision_model.post_layernorm.weight"])
    # No module names the projector: the base's is copied.
    assert torch.equal(merged["multi_modal_projector.linear_1.weight"], ta["multi_modal_projector.linear_1.weight"])
    config = json.loads((out / "config.json").read_text())
    assert config["text_config"]["num_hidden_layers"] == 4 and config["vision_config"]["num_hidden_layers"] == 1


def test_a_module_that_matches_nothing_is_refused(llavas):
    from guiapp.merging.merge import plan_merge

    a, b = llavas
    recipe = parse_recipe(f"merge_method: linear\nmodules:\n  audio_tower:\n    models: [{{model: {a}, parameters: {{weight: 1}}}}]\n"
                          f"  text_decoder:\n    models: [{{model: {a}, parameters: {{weight: 1}}}}]\n")
    with pytest.raises(RecipeError, match="`audio_tower` matches no tensor") as caught:
        plan_merge(recipe)
    assert "language_model" in caught.value.why
