"""tokenizer_source / tokenizer: union vocabularies, donors, token overrides, padding and padded vocabularies.

Expected rows are computed here from the input files by token text, independently of Mergesmith's code.
"""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.recipe import parse_recipe
from tests.engine.helpers import load_folder
from tests.recipes.models import (
    SPECIALS,
    rows_of,
    write_gpt2,
    write_gpt2_style_tokenizer,
    write_model,
    write_tokenizer_files,
)
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - pytest fixtures

A_TOKENS = SPECIALS + ["a", "b", "c"]
B_TOKENS = SPECIALS + ["a", "b", "d", "e"]
HEADS = ("model.embed_tokens.weight", "lm_head.weight")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vocab")
    return write_model(folder / "a", A_TOKENS, seed=1), write_model(folder / "b", B_TOKENS, seed=2)


def _merge(tmp_path, text):
    return run_merge(parse_recipe(text), MergeSettings(tmp_path / "out")).output


def _row(folder, tokens, token, name):
    return rows_of(folder, name)[tokens.index(token)]


def test_union_vocabulary_and_donor_rows(pair, tmp_path):
    a, b = pair
    out = _merge(tmp_path, f"merge_method: linear\nbase_model: {a}\ntokenizer_source: union\nmodels:\n"
                           f"  - model: {a}\n    parameters: {{weight: 0.5}}\n  - model: {b}\n    parameters: {{weight: 0.5}}\n")
    tokenizer = AutoTokenizer.from_pretrained(out)
    vocab = tokenizer.get_vocab()
    assert set(vocab) == set(A_TOKENS) | set(B_TOKENS)
    assert tokenizer.convert_ids_to_tokens(tokenizer("a d e c")["input_ids"]) == ["a", "d", "e", "c"]
    merged = load_folder(out)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == len(vocab) == 8
    for name in HEADS:
        assert merged[name].shape[0] == 8
        for token in ("d", "e"):  # only b has them: b's own rows
            assert torch.equal(merged[name][vocab[token]], _row(b, B_TOKENS, token, name))
        assert torch.equal(merged[name][vocab["c"]], _row(a, A_TOKENS, "c", name))  # only a
        both = 0.5 * _row(a, A_TOKENS, "a", name) + 0.5 * _row(b, B_TOKENS, "a", name)
        assert torch.allclose(merged[name][vocab["a"]], both, atol=1e-7)


def test_token_overrides_force_and_padding(pair, tmp_path):
    a, b = pair
    out = _merge(tmp_path, f"""merge_method: linear
tokenizer:
  source: union
  pad_to_multiple_of: 16
  tokens:
    d: {{source: {{kind: zero}}}}
    a: {{source: {b}, force: true}}
    c: {{source: {{kind: model_token, model: {a}, token: b}}}}
models:
  - model: {a}
    parameters: {{weight: 0.5}}
  - model: {b}
    parameters: {{weight: 0.5}}
""")
    vocab = AutoTokenizer.from_pretrained(out).get_vocab()
    merged = load_folder(out)["model.embed_tokens.weight"]
    assert merged.shape[0] == 16 and json.loads((out / "config.json").read_text())["vocab_size"] == 16
    name = "model.embed_tokens.weight"
    # d: b keeps its own row (not forced), a gets zeros → the mean is half of b's row.
    assert torch.allclose(merged[vocab["d"]], 0.5 * _row(b, B_TOKENS, "d", name), atol=1e-7)
    assert torch.allclose(merged[vocab["a"]], _row(b, B_TOKENS, "a", name), atol=1e-7)  # forced for both
    # c: a has it; b lacks it and takes a's row of token "b".
    expected_c = 0.5 * _row(a, A_TOKENS, "c", name) + 0.5 * _row(a, A_TOKENS, "b", name)
    assert torch.allclose(merged[vocab["c"]], expected_c, atol=1e-7)
    assert torch.allclose(merged[8:], merged[:8].mean(dim=0).expand(8, -1), atol=1e-6)  # padding: the mean row


def test_tokenizer_donor_that_is_not_merged(pair, tmp_path):
    a, b = pair
    donor = write_tokenizer_files(tmp_path / "donor", SPECIALS + ["e", "a", "zzz"])
    out = _merge(tmp_path, f"merge_method: linear\ntokenizer_source: {donor}\nmodels:\n"
                           f"  - model: {a}\n    parameters: {{weight: 1.0}}\n  - model: {b}\n    parameters: {{weight: 1.0}}\n")
    vocab = AutoTokenizer.from_pretrained(out).get_vocab()
    assert set(vocab) == set(SPECIALS + ["e", "a", "zzz"])
    merged = load_folder(out)["model.embed_tokens.weight"]
    name = "model.embed_tokens.weight"
    assert merged.shape[0] == 6
    assert torch.equal(merged[vocab["e"]], _row(b, B_TOKENS, "e", name))
    assert torch.equal(merged[vocab["zzz"]], torch.zeros(merged.shape[1]))  # in no model
    assert torch.allclose(merged[vocab["a"]], (_row(a, A_TOKENS, "a", name) + _row(b, B_TOKENS, "a", name)) / 2)


def test_padded_vocabulary_is_trimmed_to_the_tokenizer(tmp_path):
    # Qwen2-style: 10 embedding rows for 6 tokens, q/k/v biases.
    base = write_model(tmp_path / "base", A_TOKENS, seed=3, rows=10, biases=True, model_type="qwen2")
    tune = write_model(tmp_path / "tune", A_TOKENS, seed=4, rows=10, biases=True, model_type="qwen2")
    out = _merge(tmp_path, f"merge_method: task_arithmetic\nbase_model: {base}\ntokenizer_source: base\n"
                           f"models:\n  - model: {tune}\n    parameters: {{weight: 1.0}}\n")
    merged = load_folder(out)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 6
    for name in HEADS:
        assert merged[name].shape[0] == 6
        assert torch.allclose(merged[name], rows_of(tune, name)[:6], atol=1e-6)  # base + 1·(tune − base)
    assert "model.layers.0.self_attn.q_proj.bias" in merged


def test_tokenizer_donor_on_the_hub_lends_only_its_tokenizer(pair, hub_env, tmp_path):
    # A tokenizer-only repo (no weights): only its tokenizer files are fetched.
    a, b = pair
    hub_env.server.add_model("acme/tokenizer", write_tokenizer_files(tmp_path / "served", SPECIALS + ["e", "a"]))
    out = _merge(tmp_path, f"merge_method: linear\ntokenizer_source: acme/tokenizer\nmodels:\n"
                           f"  - model: {a}\n    parameters: {{weight: 1.0}}\n  - model: {b}\n    parameters: {{weight: 1.0}}\n")
    vocab = AutoTokenizer.from_pretrained(out).get_vocab()
    assert set(vocab) == set(SPECIALS + ["e", "a"])
    assert torch.equal(load_folder(out)["model.embed_tokens.weight"][vocab["e"]],
                       _row(b, B_TOKENS, "e", "model.embed_tokens.weight"))


def test_a_donor_that_does_not_exist_is_reported_before_any_work(pair, hub_env, tmp_path):
    from guiapp.errors import MergesmithError
    from guiapp.merging.merge import plan_merge

    a, b = pair
    recipe = parse_recipe(f"merge_method: linear\ntokenizer_source: acme/missing\nmodels:\n  - model: {a}\n"
                          f"    parameters: {{weight: 1.0}}\n  - model: {b}\n    parameters: {{weight: 1.0}}\n")
    with pytest.raises(MergesmithError, match="acme/missing"):
        plan_merge(recipe)


def test_a_gpt2_stack_gets_the_first_model_s_tokenizer_as_mergekit_writes_it(tmp_path):
    """GPT-2-style tokenizers (vocab.json + merges.txt, no tokenizer.json): mergekit loads the first model's with
    transformers and saves it, which writes a tokenizer.json; the output has one, built from that model's files."""
    a = write_gpt2_style_tokenizer(write_gpt2(tmp_path / "a", SPECIALS, seed=1), "hello world merge models")
    b = write_gpt2_style_tokenizer(write_gpt2(tmp_path / "b", SPECIALS, seed=2), "another text entirely")
    out = _merge(tmp_path, f"merge_method: passthrough\nslices:\n  - sources:\n      - model: {a}\n"
                           f"        layer_range: [0, 2]\n  - sources:\n      - model: {b}\n        layer_range: [0, 2]\n")
    text = "hello models, another world"
    written = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert written.encode(text).ids == AutoTokenizer.from_pretrained(a).encode(text)
    assert written.encode(text).ids != AutoTokenizer.from_pretrained(b).encode(text)
    assert (out / "vocab.json").read_bytes() == (a / "vocab.json").read_bytes()
    assert (out / "merges.txt").read_bytes() == (a / "merges.txt").read_bytes()
