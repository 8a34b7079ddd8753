"""One tensor-role table: which tensors are embeddings, heads, final norms and layers, for GPT-NeoX-, Llama-,
Gemma- (tied) and BERT-shaped models, with and without a config naming the architecture."""

from __future__ import annotations

import pytest
import torch

from guiapp.checkpoints.samples import BertShape, bert_tensors, write_checkpoint
from guiapp.checkpoints.tensor_roles import TensorRole, tensor_place
from guiapp.merging.merge import MergeSettings, run_merge
from tests.engine.helpers import load_folder, recipe

VOCAB, HIDDEN, LAYERS = 64, 16, 4


def neox_tensors(seed: int) -> dict[str, torch.Tensor]:
    """A GPT-NeoX (Pythia) layout: `gpt_neox.embed_in` is the embedding, `embed_out` the untied output head."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    tensors = {"gpt_neox.embed_in.weight": rand(VOCAB, HIDDEN), "embed_out.weight": rand(VOCAB, HIDDEN),
               "gpt_neox.final_layer_norm.weight": rand(HIDDEN), "gpt_neox.final_layer_norm.bias": rand(HIDDEN)}
    for i in range(LAYERS):
        prefix = f"gpt_neox.layers.{i}."
        tensors |= {prefix + "attention.query_key_value.weight": rand(3 * HIDDEN, HIDDEN),
                    prefix + "attention.dense.weight": rand(HIDDEN, HIDDEN),
                    prefix + "input_layernorm.weight": rand(HIDDEN)}
    return tensors


NEOX_CONFIG = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "num_hidden_layers": LAYERS,
               "vocab_size": VOCAB, "hidden_size": HIDDEN, "tie_word_embeddings": False}


@pytest.mark.parametrize("architecture", [None, "GPTNeoXForCausalLM"])
def test_gpt_neox_head_and_embedding(architecture):
    assert tensor_place("embed_out.weight", architecture).role is TensorRole.HEAD
    assert tensor_place("gpt_neox.embed_in.weight", architecture).role is TensorRole.EMBEDDING
    assert tensor_place("gpt_neox.final_layer_norm.bias", architecture).role is TensorRole.NORM
    layer = tensor_place("gpt_neox.layers.3.attention.dense.weight", architecture)
    assert layer.role is TensorRole.LAYER and layer.layer.index == 3


@pytest.mark.parametrize("architecture", [None, "LlamaForCausalLM", "Qwen2ForCausalLM", "Phi3ForCausalLM",
                                          "GemmaForCausalLM"])
def test_llama_family_roles(architecture):
    assert tensor_place("model.embed_tokens.weight", architecture).role is TensorRole.EMBEDDING
    assert tensor_place("lm_head.weight", architecture).role is TensorRole.HEAD
    assert tensor_place("model.norm.weight", architecture).role is TensorRole.NORM
    assert tensor_place("model.layers.0.self_attn.qkv_proj.weight", architecture).layer.suffix == \
        "self_attn.qkv_proj.weight"  # Phi-3's fused projections are ordinary layer tensors


@pytest.mark.parametrize("architecture", [None, "GPT2LMHeadModel"])
def test_gpt2_roles(architecture):
    assert tensor_place("transformer.wte.weight", architecture).role is TensorRole.EMBEDDING
    wpe = tensor_place("transformer.wpe.weight", architecture)
    assert wpe.role is TensorRole.OTHER and wpe.before_layers
    assert tensor_place("transformer.ln_f.weight", architecture).role is TensorRole.NORM
    assert tensor_place("transformer.h.2.attn.c_attn.weight", architecture).layer.index == 2


@pytest.mark.parametrize("architecture", [None, "BertForMaskedLM"])
def test_bert_roles(architecture):
    names = bert_tensors(BertShape(), torch.Generator().manual_seed(0))
    places = {name: tensor_place(name, architecture) for name in names}
    words = next(n for n in names if n.endswith("word_embeddings.weight"))
    assert places[words].role is TensorRole.EMBEDDING
    for name, place in places.items():
        if name.startswith("embeddings.") or ".embeddings." in name:
            assert place.before_layers, name  # position/type embeddings and their LayerNorm come first
        elif ".layer." in name:
            assert place.role is TensorRole.LAYER, name
        else:
            assert not place.before_layers, name  # pooler, prediction head


def test_gpt_neox_slice_merge_takes_head_and_final_norm_from_the_last_slice(tmp_path):
    """The output head belongs with the final norm: both come from the model whose layers end the result."""
    first = write_checkpoint(tmp_path / "first", neox_tensors(0), NEOX_CONFIG)
    last = write_checkpoint(tmp_path / "last", neox_tensors(1), NEOX_CONFIG)
    text = (f"merge_method: passthrough\nslices:\n  - sources:\n      - model: {first}\n        layer_range: [0, 2]\n"
            f"  - sources:\n      - model: {last}\n        layer_range: [2, 4]\n")
    run_merge(recipe(text), MergeSettings(tmp_path / "out"))
    merged, a, b = load_folder(tmp_path / "out"), load_folder(first), load_folder(last)
    assert torch.equal(merged["gpt_neox.embed_in.weight"], a["gpt_neox.embed_in.weight"])
    assert torch.equal(merged["gpt_neox.final_layer_norm.weight"], b["gpt_neox.final_layer_norm.weight"])
    assert torch.equal(merged["embed_out.weight"], b["embed_out.weight"])


def test_gemma_tied_model_uses_its_embeddings_as_head(tmp_path):
    """A tied model merged with an untied one: the tied model's embeddings stand in for its missing head."""
    from guiapp.checkpoints.samples import LlamaShape, write_llama  # noqa: PLC0415

    shape = LlamaShape(hidden=32, intermediate=64, layers=1, heads=2, kv_heads=1, vocab=VOCAB)
    tied = write_llama(tmp_path / "tied", shape, seed=0, tie_embeddings=True, dtype=torch.float32)
    untied = write_llama(tmp_path / "untied", shape, seed=1, dtype=torch.float32)
    text = (f"merge_method: linear\nmodels:\n  - model: {tied}\n    parameters: {{weight: 0.5}}\n"
            f"  - model: {untied}\n    parameters: {{weight: 0.5}}\n")
    run_merge(recipe(text), MergeSettings(tmp_path / "out"))
    merged, a, b = load_folder(tmp_path / "out"), load_folder(tied), load_folder(untied)
    expected = (a["model.embed_tokens.weight"] + b["lm_head.weight"]) / 2
    assert torch.allclose(merged["lm_head.weight"], expected)
