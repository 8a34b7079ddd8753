"""The recipe features on other architectures' tensor layouts: Gemma-2 (tied embeddings), Phi-3 (fused
projections, padded vocabulary), GPT-2 (`transformer.wte`, `h.N`), Mistral (the `modules: {default}` form).
Expected values are computed here from the input files."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.recipe import parse_recipe
from tests.engine.helpers import load_folder
from tests.recipes.models import SPECIALS, write_gemma2, write_gpt2, write_mistral, write_phi3


def _run(tmp_path, text):
    return run_merge(parse_recipe(text), MergeSettings(tmp_path / "out")).output


def _two(a, b, wa=0.5, wb=0.5):
    return f"  - model: {a}\n    parameters: {{weight: {wa}}}\n  - model: {b}\n    parameters: {{weight: {wb}}}\n"


def test_gemma2_tied_union(tmp_path):
    a = write_gemma2(tmp_path / "a", SPECIALS + ["x", "y"], 1)
    b = write_gemma2(tmp_path / "b", SPECIALS + ["y", "z"], 2)
    out = _run(tmp_path, f"merge_method: linear\ntokenizer_source: union\nmodels:\n{_two(a, b)}")
    vocab = AutoTokenizer.from_pretrained(out).get_vocab()
    merged, wa, wb = load_folder(out), load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    name = "model.embed_tokens.weight"
    assert "lm_head.weight" not in merged  # still tied
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["vocab_size"] == 6 == merged[name].shape[0]
    assert torch.equal(merged[name][vocab["z"]], wb[name][4])  # only b has z (its row 4)
    assert torch.equal(merged[name][vocab["x"]], wa[name][3])  # only a has x
    # y is a's row 4 and b's row 3: both kept, then averaged.
    assert torch.allclose(merged[name][vocab["y"]], 0.5 * wa[name][4] + 0.5 * wb[name][3], atol=1e-7)


def test_phi3_fused_projections_and_padded_vocabulary(tmp_path):
    tokens = SPECIALS + ["p", "q", "r"]
    a, b = write_phi3(tmp_path / "a", tokens, 1, rows=12), write_phi3(tmp_path / "b", tokens, 2, rows=12)
    out = _run(tmp_path, f"merge_method: linear\ntokenizer_source: base\nbase_model: {a}\nmodels:\n{_two(a, b, 0.25, 0.75)}")
    merged, wa, wb = load_folder(out), load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 6
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert torch.allclose(merged[name], 0.25 * wa[name][:6] + 0.75 * wb[name][:6], atol=1e-7)
    for name in ("model.layers.1.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"):
        assert torch.allclose(merged[name], 0.25 * wa[name] + 0.75 * wb[name], atol=1e-7)


def test_gpt2_union_and_chat_template(tmp_path):
    a = write_gpt2(tmp_path / "a", SPECIALS + ["hello"], 1)
    b = write_gpt2(tmp_path / "b", SPECIALS + ["world", "hello"], 2)
    out = _run(tmp_path, f"merge_method: linear\ntokenizer: {{source: union}}\nchat_template: llama3\nmodels:\n{_two(a, b)}")
    tokenizer = AutoTokenizer.from_pretrained(out)
    vocab = tokenizer.get_vocab()
    merged, wb = load_folder(out), load_file(b / "model.safetensors")
    assert set(vocab) == set(SPECIALS + ["hello", "world"])
    assert torch.equal(merged["transformer.wte.weight"][vocab["world"]], wb["transformer.wte.weight"][3])
    assert merged["transformer.wpe.weight"].shape[0] == 8  # positions are not a vocabulary
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 5
    assert "<|start_header_id|>" in tokenizer.chat_template


def test_mistral_default_module_form_with_exponent_numbers(tmp_path):
    a, b = write_mistral(tmp_path / "a", 1), write_mistral(tmp_path / "b", 2)
    out = _run(tmp_path, f"""merge_method: linear
modules:
  default:
    parameters: {{weight: 5e-1}}
    slices:
      - sources:
          - model: {a}
            layer_range: [0, 2]
          - model: {b}
            layer_range: [0, 2]
            parameters: {{weight: 1.5e0}}
""")
    merged, wa, wb = load_folder(out), load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    name = "model.layers.1.mlp.down_proj.weight"
    assert torch.allclose(merged[name], (0.5 * wa[name] + 1.5 * wb[name]) / 2.0, atol=1e-7)
