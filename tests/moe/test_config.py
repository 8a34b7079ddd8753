"""Reading mergekit-moe configurations: the format unchanged, and every mistake named with its key and what to do."""

from __future__ import annotations

import pytest

from guiapp.errors import RecipeError
from guiapp.moe.config import load_moe_config, parse_moe_config

LAZY_MERGEKIT = """
base_model: mlabonne/AlphaMonarch-7B
experts:
  - source_model: mlabonne/AlphaMonarch-7B
    positive_prompts:
      - "chat"
      - "assistant"
  - source_model: beowolx/CodeNinja-1.0-OpenChat-7B
    positive_prompts:
      - "code"
      - "python"
    negative_prompts:
      - "poem"
"""


def test_a_published_configuration_reads_unchanged():
    config = parse_moe_config(LAZY_MERGEKIT)
    assert str(config.base_model) == "mlabonne/AlphaMonarch-7B"
    assert config.gate_mode == "hidden" and config.experts_per_token == 2 and config.dtype is None
    assert [str(e.source_model) for e in config.experts] == ["mlabonne/AlphaMonarch-7B",
                                                              "beowolx/CodeNinja-1.0-OpenChat-7B"]
    assert config.experts[1].negative_prompts == ("poem",)
    assert [str(ref) for ref in config.models()] == ["mlabonne/AlphaMonarch-7B", "beowolx/CodeNinja-1.0-OpenChat-7B"]


@pytest.mark.parametrize(("text", "words", "key"), [
    ("experts: []", "no base_model", ("base_model",)),
    ("base_model: a/b\nexperts: []", "must be a list of experts", ("experts",)),
    ("base_model: a/b\ngate_mode: hiden\nexperts: [{source_model: c/d}]", 'Did you mean "hidden"', ("gate_mode",)),
    ("base_model: a/b\nexperts: [{source_model: c/d}]", "no positive_prompts", ("experts", 0, "positive_prompts")),
    ("base_model: a/b\ngate_mode: random\nexperts: [{source_model: c/d}]", "only 1 experts", ("experts_per_token",)),
    ("base_model: a/b\ngate_mode: random\nexperts_per_token: 0\nexperts: [{source_model: c/d}]", "1 or more",
     ("experts_per_token",)),
    ("base_model: a/b\nexperts: [{source_model: c/d, positive_prompts: [x]}, {source_model: e/f, "
     "positive_prompts: [x]}]", "same prompts", ("experts",)),
    ("base_model: a/b\ndtype: int8\ngate_mode: random\nexperts_per_token: 1\nexperts: [{source_model: c/d}]",
     "not one Mergesmith writes", ("dtype",)),
    ("base_model: a/b\ngate_mode: random\nexperts_per_token: 1\nexperts: [{source_model: c/d, residual_scale: x}]",
     "must be a number", ("experts", 0, "residual_scale")),
    ("- just a list", "must be a YAML mapping", ()),
    ("base_model: !!python/object/apply:os.system [ls]\nexperts: []", "python", ()),
])
def test_mistakes_are_named_with_their_key(text, words, key):
    with pytest.raises(RecipeError) as caught:
        parse_moe_config(text)
    error = caught.value
    assert words in f"{error} {error.hint}"
    assert error.key == key
    assert error.hint


def test_unknown_keys_are_warned_about_not_silently_ignored():
    config = parse_moe_config(LAZY_MERGEKIT + "gate_mod: cheap_embed\n")
    assert config.gate_mode == "hidden"
    assert config.warnings == ('Unknown key "gate_mod" in the configuration is ignored (did you mean "gate_mode"?).',)


def test_a_configuration_file_that_is_not_text_is_refused(tmp_path):
    path = tmp_path / "moe.yml"
    path.write_bytes(b"\x00\xff" * 100)
    with pytest.raises(RecipeError):
        load_moe_config(path)


def test_experts_that_are_all_one_model_are_warned_about():
    config = parse_moe_config("base_model: a/b\ngate_mode: random\nexperts: [{source_model: c/d}, {source_model: c/d}]")
    assert any("Every expert is the same model" in warning for warning in config.warnings)
    assert not parse_moe_config(LAZY_MERGEKIT).warnings
