"""GGUF export, read back with gguf-py (llama.cpp's own reader): metadata, tensor names and shapes, values within
each type's error bound, q/k permuted as llama.cpp's converter permutes them, the tokenizer tables, and logits of
the model rebuilt from the dequantized file against the source's."""

from __future__ import annotations

import json
import re
import shutil

import gguf
import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from guiapp.gguf.architectures import plan_tensors, source_of
from guiapp.gguf.check import gguf_weights
from guiapp.gguf.quantize import FILE_KINDS
from tests.gguf import models

ARCHITECTURES = list(models.BUILDERS)
GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2", "gemma3": "gemma3",
             "phi3": "phi3"}
# Root-mean-square error of a stored tensor relative to its values' RMS, per stored type (random Gaussian
# weights; llama.cpp's reference quantizers reach about half of each).
RELATIVE_RMS = {"F32": 1e-6, "F16": 1e-3, "BF16": 5e-3, "Q8_0": 0.01, "Q6_K": 0.03, "Q5_1": 0.05, "Q5_0": 0.06,
                "Q5_K": 0.06, "Q4_K": 0.12, "Q4_0": 0.14}
# Mean KL divergence of next-token distributions, file rebuilt vs source, per file type.
KL_BOUND = {"f32": 1e-9, "f16": 1e-5, "bf16": 1e-3, "q8_0": 5e-3, "q6_k": 0.02, "q5_k_m": 0.05, "q4_k_m": 0.3,
            "q4_0": 0.4}


def _fields(path) -> dict:
    reader = gguf.GGUFReader(path)
    return {name: field.contents() for name, field in reader.fields.items()}, reader


def _source_tensors(folder) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def _shapes(folder) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in _source_tensors(folder).items()}


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("kind", ["f16", "q8_0", "q4_k_m", pytest.param("bf16", marks=pytest.mark.slow)])
def test_metadata_names_shapes_and_values_read_back(architecture, kind, tiny_models, exported):
    folder = tiny_models[architecture]
    config = json.loads((folder / "config.json").read_text())
    fields, reader = _fields(exported(architecture, kind))
    arch = GGUF_ARCH[architecture]
    assert fields["general.architecture"] == arch
    assert fields["general.file_type"] == int(FILE_KINDS[kind].file_type)
    assert fields[f"{arch}.block_count"] == config["num_hidden_layers"]
    assert fields[f"{arch}.context_length"] == config["max_position_embeddings"]
    assert fields[f"{arch}.embedding_length"] == config["hidden_size"]
    assert fields[f"{arch}.attention.head_count"] == config["num_attention_heads"]
    assert fields[f"{arch}.attention.head_count_kv"] == config["num_key_value_heads"]
    assert fields[f"{arch}.attention.layer_norm_rms_epsilon"] == pytest.approx(config["rms_norm_eps"])
    source = source_of(config, architecture)
    assert fields[f"{arch}.rope.freq_base"] == pytest.approx(source.rope()["rope_theta"])
    # Every tensor is there with its shape, and reads back (changes undone) within its stored type's bound.
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    original = _source_tensors(folder)
    weights = gguf_weights(exported(architecture, kind), source, _shapes(folder))
    planned = [t for t in plan_tensors(source, _shapes(folder), architecture) if t.source is not None]
    assert set(types) == {t.name for t in plan_tensors(source, _shapes(folder), architecture)}
    for tensor in planned:
        want, values = original[tensor.source].float(), weights[tensor.source]
        assert values.shape == want.shape, tensor.name
        error = (values - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt()
        assert error <= RELATIVE_RMS[types[tensor.name]], f"{tensor.name} ({types[tensor.name]}): {error:.4f}"


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("kind", ["f32", "q4_k_m", *(pytest.param(k, marks=pytest.mark.slow) for k in ("f16", "q8_0"))])
def test_logits_of_the_model_rebuilt_from_the_file_match_the_source(architecture, kind, tiny_models, exported):
    folder = tiny_models[architecture]
    config = json.loads((folder / "config.json").read_text())
    source_model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    rebuilt = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    weights = gguf_weights(exported(architecture, kind), source_of(config, architecture), _shapes(folder))
    missing, unexpected = rebuilt.load_state_dict(weights, strict=False)
    assert unexpected == [] and set(missing) <= {"lm_head.weight"}
    ids = transformers.AutoTokenizer.from_pretrained(folder)(models.SAMPLE, return_tensors="pt").input_ids
    with torch.no_grad():
        want = source_model(ids).logits.log_softmax(-1)
        got = rebuilt(ids).logits.log_softmax(-1)
    divergence = (want.exp() * (want - got)).sum(-1).mean().item()
    assert divergence <= KL_BOUND[kind]


def test_llama_q_and_k_are_permuted_as_llama_cpps_converter_permutes_them(tiny_models, exported):
    folder = tiny_models["llama"]
    config = json.loads((folder / "config.json").read_text())
    _, reader = _fields(exported("llama", "f32"))
    stored = {t.name: np.array(t.data) for t in reader.tensors}
    original = _source_tensors(folder)

    def reference_permute(weights: torch.Tensor, n_head: int) -> torch.Tensor:  # convert_hf_to_gguf.py's
        return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]) \
            .swapaxes(1, 2).reshape(weights.shape)

    for layer in range(config["num_hidden_layers"]):
        q = original[f"model.layers.{layer}.self_attn.q_proj.weight"]
        k = original[f"model.layers.{layer}.self_attn.k_proj.weight"]
        v = original[f"model.layers.{layer}.self_attn.v_proj.weight"]
        assert np.array_equal(stored[f"blk.{layer}.attn_q.weight"],
                              reference_permute(q, config["num_attention_heads"]).numpy())
        assert np.array_equal(stored[f"blk.{layer}.attn_k.weight"],
                              reference_permute(k, config["num_key_value_heads"]).numpy())
        assert np.array_equal(stored[f"blk.{layer}.attn_v.weight"], v.numpy())
        assert not np.array_equal(stored[f"blk.{layer}.attn_q.weight"], q.numpy())


def test_gemma_norms_carry_the_added_one_and_qwen_names_map(tiny_models, exported):
    _, reader = _fields(exported("gemma2", "f32"))
    stored = {t.name: np.array(t.data) for t in reader.tensors}
    original = _source_tensors(tiny_models["gemma2"])
    assert np.allclose(stored["blk.0.attn_norm.weight"], original["model.layers.0.input_layernorm.weight"] + 1)
    assert np.allclose(stored["output_norm.weight"], original["model.norm.weight"] + 1)
    assert "output.weight" not in stored  # Gemma's output is its token embedding
    _, reader = _fields(exported("qwen3", "f32"))
    names = {t.name for t in reader.tensors}
    assert {"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight", "token_embd.weight"} <= names


def test_rope_theta_is_read_from_transformers_5_rope_parameters(tiny_models, exported):
    config = json.loads((tiny_models["llama"] / "config.json").read_text())
    assert "rope_theta" not in config and config["rope_parameters"]["rope_theta"] == 500000.0
    fields, _ = _fields(exported("llama", "q8_0"))
    assert fields["llama.rope.freq_base"] == 500000.0
    assert fields["llama.rope.dimension_count"] == config["hidden_size"] // config["num_attention_heads"]


@pytest.mark.parametrize(("architecture", "model", "pre", "add_bos"), [
    ("llama", "gpt2", "llama-bpe", True), ("qwen2", "gpt2", "qwen2", False), ("phi3", "gpt2", "gpt-2", False),
    ("gemma2", "llama", "default", True)])
def test_the_tokenizer_tables_round_trip(architecture, model, pre, add_bos, tiny_models, exported):
    folder = tiny_models[architecture]
    document = json.loads((folder / "tokenizer.json").read_text())
    fields, reader = _fields(exported(architecture, "q8_0"))
    assert fields["tokenizer.ggml.model"] == model
    assert fields["tokenizer.ggml.pre"] == pre
    assert fields["tokenizer.ggml.add_bos_token"] is add_bos
    tokens = fields["tokenizer.ggml.tokens"]
    rows = next(t for t in reader.tensors if t.name == "token_embd.weight").shape.tolist()[1]
    assert len(tokens) == rows
    by_id = {token_id: text for text, token_id in document["model"]["vocab"].items()}
    by_id.update({entry["id"]: entry["content"] for entry in document["added_tokens"]})
    assert all(tokens[i] == text for i, text in by_id.items())
    assert all(tokens[i] == f"[PAD{i}]" for i in range(len(tokens)) if i not in by_id)
    types = fields["tokenizer.ggml.token_type"]
    unknown = document["model"].get("unk_token")
    for entry in document["added_tokens"]:
        want = gguf.TokenType.UNKNOWN if entry["content"] == unknown else \
            gguf.TokenType.BYTE if entry["content"].startswith("<0x") else gguf.TokenType.CONTROL
        assert types[entry["id"]] == want
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert fields["tokenizer.ggml.bos_token_id"] == tokenizer.bos_token_id
    assert fields["tokenizer.ggml.eos_token_id"] == tokenizer.eos_token_id
    assert fields["tokenizer.chat_template"] == tokenizer.chat_template
    if model == "gpt2":
        merges = [" ".join(m) if isinstance(m, list) else m for m in document["model"]["merges"]]
        assert fields["tokenizer.ggml.merges"] == merges
    else:
        assert fields["tokenizer.ggml.add_space_prefix"] is False
        scores = fields["tokenizer.ggml.scores"]
        ranked = [document["model"]["vocab"]["".join(m if isinstance(m, list) else m.split(" "))]
                  for m in document["model"]["merges"][:20]]
        assert [scores[i] for i in ranked] == sorted((scores[i] for i in ranked), reverse=True)
        assert types[document["model"]["vocab"]["<0x41>"]] == gguf.TokenType.BYTE


# llama.cpp gives a model whose general.name contains "phi-3" or "phi3" the Phi-3 tokenizer's strip rules, looking
# these tokens up by text (llama-vocab.cpp); when one is missing the lookup throws and llama.cpp refuses the file
# ("error loading model vocabulary: _Map_base::at"), as it refused the tiny Phi-3 below with its GPT-2-style tokenizer.
_PHI3_NAME = re.compile(r"phi-3|phi3")
_PHI3_NAMED_TOKENS = ("</s>", "<unk>", "<s>", "<|endoftext|>")


@pytest.mark.parametrize(("folder_name", "written"), [("phi3", "phi 3"), ("My-Phi-3-merge", "My-Phi 3-merge")])
def test_a_name_llama_cpp_reads_as_phi_3_comes_with_the_tokens_it_then_looks_up(folder_name, written, tiny_models,
                                                                                 tmp_path):
    from guiapp.gguf.export import export_gguf

    folder = tmp_path / folder_name
    shutil.copytree(tiny_models["phi3"], folder)
    export_gguf(str(folder), tmp_path / "out.gguf", "f16")
    fields, _ = _fields(tmp_path / "out.gguf")
    tokens = set(fields["tokenizer.ggml.tokens"])
    assert not set(_PHI3_NAMED_TOKENS) <= tokens  # this tokenizer lacks them, as Phi-4-mini's does
    assert not _PHI3_NAME.search(fields["general.name"].lower()), fields["general.name"]
    assert fields["general.name"] == written


def test_a_phi_3_name_is_kept_when_the_tokens_llama_cpp_looks_up_are_there(tiny_models, tmp_path):
    from guiapp.gguf.export import export_gguf

    folder = tmp_path / "phi3-mini"
    shutil.copytree(tiny_models["phi3"], folder)
    document = json.loads((folder / "tokenizer.json").read_text())
    vocab, merges = document["model"]["vocab"], document["model"]["merges"]
    missing = [text for text in _PHI3_NAMED_TOKENS if text not in vocab]
    for text, victim in zip(missing, sorted(vocab, key=vocab.get)[-len(missing):], strict=True):
        vocab[text] = vocab.pop(victim)  # the last merges' results, which no other merge builds on
        merges[:] = [m for m in merges if "".join(m if isinstance(m, list) else m.split(" ")) != victim]
    (folder / "tokenizer.json").write_text(json.dumps(document))
    export_gguf(str(folder), tmp_path / "out.gguf", "f16")
    fields, _ = _fields(tmp_path / "out.gguf")
    assert set(_PHI3_NAMED_TOKENS) <= set(fields["tokenizer.ggml.tokens"])
    assert fields["general.name"] == "phi3-mini"


def test_q4_k_m_gives_llama_cpps_mix(tiny_models, exported):
    _, reader = _fields(exported("llama", "q4_k_m"))
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    # Two layers: llama.cpp's use_more_bits picks layer 1 (the last eighth) for Q6_K, not layer 0.
    assert types["output.weight"] == "Q6_K"
    assert types["blk.1.attn_v.weight"] == types["blk.1.ffn_down.weight"] == "Q6_K"
    assert types["blk.0.attn_v.weight"] == types["blk.0.ffn_down.weight"] == types["blk.0.attn_q.weight"] == "Q4_K"
    assert types["token_embd.weight"] == "Q4_K" and types["blk.0.attn_norm.weight"] == "F32"


def test_rows_that_do_not_fit_a_k_quant_fall_back_as_llama_cpp_does(exported):
    _, reader = _fields(exported("qwen2", "q4_k_m"))  # hidden size 64: no 256-value blocks
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == "Q5_0" and types["output.weight"] == "Q8_0"


@pytest.mark.parametrize("kind", list(FILE_KINDS))
def test_the_predicted_size_is_the_files_size(kind, tiny_models, exported):
    from guiapp.checkpoints.sources import read_headers
    from guiapp.gguf.export import predicted_sizes
    from guiapp.hub.references import ModelRef

    folder = tiny_models["llama"]
    predicted = predicted_sizes(read_headers(ModelRef.parse(str(folder))), folder)[kind]
    assert predicted == exported("llama", kind).stat().st_size


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_predicted_size_holds_for_every_tokenizer_layout(architecture, tiny_models, exported):
    from guiapp.checkpoints.sources import read_headers
    from guiapp.gguf.export import predicted_sizes
    from guiapp.hub.references import ModelRef

    folder = tiny_models[architecture]
    predicted = predicted_sizes(read_headers(ModelRef.parse(str(folder))), folder)["q8_0"]
    assert predicted == exported(architecture, "q8_0").stat().st_size


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_a_second_gguf_reader_finds_the_file_valid_and_decodes_it_alike(architecture, exported):
    """libgguf's own reader and native dequantizer (C++, not gguf-py) agree with gguf-py on every tensor."""
    import libgguf
    from libgguf.inspect import validate_gguf

    path = exported(architecture, "q4_k_m")
    assert validate_gguf(path).issues == ()
    for tensor in gguf.GGUFReader(path).tensors:
        if tensor.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            continue
        theirs = libgguf.dequantize_rows(np.array(tensor.data), libgguf.GGMLQuantizationType(int(tensor.tensor_type)),
                                         n_per_row=int(tensor.shape[0]))
        ours = gguf.quants.dequantize(np.array(tensor.data), tensor.tensor_type)
        assert np.array_equal(theirs.reshape(ours.shape), ours), tensor.name


def test_gemma_settings_llama_cpp_reads(exported):
    gemma2, _ = _fields(exported("gemma2", "q8_0"))
    assert gemma2["gemma2.attn_logit_softcapping"] == 50.0 and gemma2["gemma2.final_logit_softcapping"] == 30.0
    assert gemma2["gemma2.attention.sliding_window"] == 128 and gemma2["gemma2.attention.key_length"] == 16
    gemma3, _ = _fields(exported("gemma3", "q8_0"))
    # transformers 5 keeps Gemma 3's two rope thetas per layer type: global layers 1e6, sliding ones 1e4.
    assert gemma3["gemma3.rope.freq_base"] == 1_000_000.0 and gemma3["gemma3.rope.freq_base_swa"] == 10_000.0
    phi3, _ = _fields(exported("phi3", "q8_0"))
    assert phi3["phi3.rope.dimension_count"] == 16 and phi3["phi3.rope.scaling.original_context_length"] == 256


def test_llama_3_1_rope_scaling_becomes_the_factors_transformers_applies():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
    config = transformers.LlamaConfig(hidden_size=2048, num_attention_heads=16, num_hidden_layers=2,
                                      max_position_embeddings=131072, rope_parameters=scaling)
    config.architectures = ["LlamaForCausalLM"]
    source = source_of(config.to_dict(), "llama-3.1")
    (planned,) = [t for t in plan_tensors(source, {}, "llama-3.1") if t.name == "rope_freqs.weight"]
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config)
    plain = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, dtype=torch.float32) / 128))
    assert torch.allclose(planned.values, plain / scaled, rtol=1e-4)


def test_a_bfloat16_model_exports_as_its_float32_widening(tiny_models, tmp_path):
    """A bf16 model's rows go to the compiled K-quants as they are (q/k permuted in bf16), no float32 pass first:
    the file holds the same blocks, byte for byte, as the export of the same values stored in float32."""
    from guiapp.gguf.export import export_gguf

    files = {}
    for dtype in (torch.bfloat16, torch.float32):
        folder = tmp_path / str(dtype).removeprefix("torch.")
        shutil.copytree(tiny_models["llama"], folder)
        tensors = {name: tensor.to(torch.bfloat16).to(dtype) for name, tensor in _source_tensors(folder).items()}
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        files[dtype] = export_gguf(str(folder), tmp_path / f"{folder.name}.gguf", "q4_k_m").path
    kept, widened = (gguf.GGUFReader(files[dtype]).tensors for dtype in files)
    assert {tensor.tensor_type.name for tensor in kept} >= {"Q4_K", "Q6_K"}
    for mine, theirs in zip(kept, widened, strict=True):
        assert mine.name == theirs.name and np.array_equal(mine.data, theirs.data), mine.name
