"""chat_template: named (mergekit's texts), auto (the inputs' most common) or literal Jinja, written into the
output's tokenizer_config.json."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from guiapp.engine.merge import MergeSettings, run_merge
from guiapp.engine.recipe import parse_recipe
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
