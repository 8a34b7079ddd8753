"""chat_template: named (mergekit's texts), auto (the inputs' most common) or literal Jinja, written into the
output's tokenizer_config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from guiapp.merging.chat_template_names import BUILT_IN_CHAT_TEMPLATES
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.recipe import parse_recipe
from tests.recipes.models import SPECIALS, write_model

TOKENS = SPECIALS + ["hi", "<|im_start|>", "<|im_end|>"]


def _merge(tmp_path, models, template):
    listed = "".join(f"  - model: {m}\n    parameters: {{weight: 1.0}}\n" for m in models)
    recipe = parse_recipe(f"merge_method: linear\nchat_template: {json.dumps(template)}\nmodels:\n{listed}")
    return run_merge(recipe, MergeSettings(tmp_path / "out")).output


def test_named_template_is_written_and_renders(tmp_path):
    model = write_model(tmp_path / "m", TOKENS, seed=1, chat_template="{{ 'own template' }}")
    out = _merge(tmp_path, [model], "chatml")
    tokenizer = AutoTokenizer.from_pretrained(out)
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                             add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"  # trim_blocks eats the newline
    assert json.loads((out / "tokenizer_config.json").read_text())["chat_template"].startswith(
        "{% for message in messages %}{{'<|im_start|>'")


def test_auto_takes_the_most_common_template(tmp_path):
    common, rare = "{{ 'template one' }}", "{{ 'template two' }}"
    models = [write_model(tmp_path / name, TOKENS, seed=i, chat_template=t)
              for i, (name, t) in enumerate([("a", rare), ("b", common), ("c", common)])]
    out = _merge(tmp_path, models, "auto")
    assert json.loads((out / "tokenizer_config.json").read_text())["chat_template"] == common


@pytest.mark.parametrize("template", ["{% for m in messages %}[{{ m['content'] }}]{% endfor %}"])
def test_literal_jinja_is_written_as_given(tmp_path, template):
    model = write_model(tmp_path / "m", TOKENS, seed=1)
    out = _merge(tmp_path, [model], template)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "[hi]"


# Copies of the texts mergekit ships as mergekit/_data/chat_templates/*.jinja: a named template's bytes are what a
# published recipe's output carries, so they are compared byte for byte.
MERGEKIT_TEMPLATES = Path(__file__).with_name("mergekit_chat_templates")


def test_every_mergekit_template_name_is_offered():
    assert BUILT_IN_CHAT_TEMPLATES == tuple(sorted(p.stem for p in MERGEKIT_TEMPLATES.glob("*.jinja")))


@pytest.mark.parametrize("name", sorted(p.stem for p in MERGEKIT_TEMPLATES.glob("*.jinja")))
def test_a_named_template_is_written_byte_for_byte_as_mergekit_ships_it(tmp_path, name):
    model = write_model(tmp_path / "m", TOKENS, seed=1)
    out = _merge(tmp_path, [model], name)
    written = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))["chat_template"]
    assert written.encode("utf-8") == (MERGEKIT_TEMPLATES / f"{name}.jinja").read_bytes()
