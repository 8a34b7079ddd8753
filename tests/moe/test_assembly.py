"""Assembling MoE models from a tiny Llama base and perturbed copies of it: the result loads in transformers' own
Mixtral and Qwen2-MoE classes and runs; the routers hold the expected gate vectors; the experts hold the sources'
weights."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file

from guiapp.errors import IncompatibleModelsError, RecipeError
from guiapp.moe.assemble import MoeSettings, assemble_moe
from guiapp.moe.config import load_moe_config
from tests.engine.helpers import fingerprint
from tests.moe.helpers import PROMPTS, assemble, expert, write_config
from tests.support.default_dtype import default_dtype, in_new_thread

SEED = 1234


def _forward(folder, cls) -> torch.Tensor:
    model = cls.from_pretrained(folder, dtype=torch.float32, trust_remote_code=False).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    ids = tokenizer("write a poem about the sea", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits
    assert torch.isfinite(logits).all()
    return logits


def _embedding_vector(models, prompts: list[str]) -> torch.Tensor:
    """The normalised sum of the prompts' token embeddings, start token included (padding excluded)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(models["base"])
    embedding = load_file(models["base"] / "model.safetensors")["model.embed_tokens.weight"]
    ids = [tokenizer.bos_token_id] + [i for p in prompts for i in tokenizer(p, add_special_tokens=False)["input_ids"]]
    ids += [tokenizer.bos_token_id] * (len(prompts) - 1)  # each prompt starts with the start token
    total = embedding[torch.tensor(ids)].sum(dim=0)
    return total / total.norm()


def _expected_cheap_row(models, name: str) -> torch.Tensor:
    positive, negative = PROMPTS[name]
    row = _embedding_vector(models, positive)
    if negative:
        row = row - _embedding_vector(models, negative)
    return row / row.norm()


def _source(models, name: str) -> dict[str, torch.Tensor]:
    return load_file(models[name] / "model.safetensors")


def test_cheap_embed_mixtral_loads_runs_and_routes_by_the_prompts_words(moe_models, tmp_path):
    before = {name: fingerprint(folder) for name, folder in moe_models.items()}
    path = write_config(tmp_path, {"base_model": str(moe_models["base"]), "gate_mode": "cheap_embed",
                                   "experts": [expert(moe_models, n) for n in ("e0", "e1", "e2")]})
    out = assemble(path, tmp_path / "moe")
    config = json.loads((tmp_path / "moe" / "config.json").read_text())
    assert config["architectures"] == ["MixtralForCausalLM"]
    assert (config["num_local_experts"], config["num_experts_per_tok"]) == (3, 2)
    _forward(tmp_path / "moe", transformers.MixtralForCausalLM)
    expected = torch.stack([_expected_cheap_row(moe_models, n) for n in ("e0", "e1", "e2")])
    for layer in range(2):
        torch.testing.assert_close(out[f"model.layers.{layer}.mlp.gate.weight"], expected, rtol=1e-5, atol=1e-6)
    base = _source(moe_models, "base")
    for index, name in enumerate(("e0", "e1", "e2")):
        source = _source(moe_models, name)
        for layer in range(2):
            prefix = f"model.layers.{layer}.mlp"
            fused = out[f"{prefix}.experts.gate_up_proj"][index]
            assert torch.equal(fused, torch.cat([source[f"{prefix}.gate_proj.weight"],
                                                 source[f"{prefix}.up_proj.weight"]]))
            assert torch.equal(out[f"{prefix}.experts.down_proj"][index], source[f"{prefix}.down_proj.weight"])
    for tensor_name in ("model.embed_tokens.weight", "model.layers.1.self_attn.q_proj.weight", "model.norm.weight"):
        assert torch.equal(out[tensor_name], base[tensor_name])
    assert {name: fingerprint(folder) for name, folder in moe_models.items()} == before


def test_random_gates_are_the_seeded_normal_draw(moe_models, tmp_path):
    path = write_config(tmp_path, {"base_model": str(moe_models["base"]), "gate_mode": "random",
                                   "experts_per_token": 1,
                                   "experts": [{"source_model": str(moe_models[n])} for n in ("e0", "e1")]})
    out = assemble(path, tmp_path / "moe", seed=SEED)
    torch.manual_seed(SEED)
    expected = torch.randn((2, 2, 32))
    for layer in range(2):
        assert torch.equal(out[f"model.layers.{layer}.mlp.gate.weight"], expected[layer])
    assert json.loads((tmp_path / "moe" / "config.json").read_text())["num_experts_per_tok"] == 1
    _forward(tmp_path / "moe", transformers.MixtralForCausalLM)
    other = assemble(path, tmp_path / "other", seed=SEED + 1)
    assert not torch.equal(other["model.layers.0.mlp.gate.weight"], out["model.layers.0.mlp.gate.weight"])


def test_hidden_gates_are_each_layers_input_at_the_last_token(moe_models, tmp_path, stored_probe):
    path = write_config(tmp_path, {"base_model": str(moe_models["base"]), "gate_mode": "hidden",
                                   "experts": [expert(moe_models, n) for n in ("e0", "e1")]})
    out = assemble(path, tmp_path / "moe")
    model = transformers.AutoModelForCausalLM.from_pretrained(moe_models["base"], dtype=torch.bfloat16).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(moe_models["base"])

    def states(prompts):  # one prompt at a time: no padding at all
        rows = []
        for prompt in prompts:
            ids = tokenizer(tokenizer.bos_token + prompt, add_special_tokens=False, return_tensors="pt")
            with torch.no_grad():
                hidden = model(**ids, output_hidden_states=True).hidden_states[:-1]
            rows.append(torch.stack([h[0, -1].float() for h in hidden]))
        return torch.stack(rows).mean(dim=0)

    rows = []
    for name in ("e0", "e1"):
        positive, negative = PROMPTS[name]
        row = states(positive) - (states(negative) if negative else 0)
        rows.append(row / row.norm(dim=-1, keepdim=True))
    expected = torch.stack(rows, dim=1)  # [layers, experts, hidden]
    for layer in range(2):
        got = out[f"model.layers.{layer}.mlp.gate.weight"].float()
        torch.testing.assert_close(got, expected[layer], atol=0.03, rtol=0.03)  # bfloat16, as mergekit-moe
    _forward(tmp_path / "moe", transformers.MixtralForCausalLM)


def test_qwen_moe_with_a_shared_expert_that_is_no_routed_expert(moe_models, tmp_path):
    """mergekit-moe 0.1.5 crashes here (it opens only the base and the routed experts)."""
    path = write_config(tmp_path, {
        "base_model": str(moe_models["base"]), "gate_mode": "cheap_embed", "architecture": "qwen",
        "dtype": "float32", "experts": [expert(moe_models, n) for n in ("e0", "e1")],
        "shared_experts": [expert(moe_models, "e2", residual_scale=0.5)]})
    out = assemble(path, tmp_path / "moe")
    config = json.loads((tmp_path / "moe" / "config.json").read_text())
    assert config["architectures"] == ["Qwen2MoeForCausalLM"] and config["qkv_bias"] is True
    assert (config["num_experts"], config["shared_expert_intermediate_size"]) == (2, 64)
    _forward(tmp_path / "moe", transformers.Qwen2MoeForCausalLM)
    shared, routed = _source(moe_models, "e2"), _source(moe_models, "e1")
    for leaf in ("gate_proj", "up_proj"):
        assert torch.equal(out[f"model.layers.1.mlp.shared_expert.{leaf}.weight"],
                           shared[f"model.layers.1.mlp.{leaf}.weight"])
        assert torch.equal(out[f"model.layers.1.mlp.experts.1.{leaf}.weight"], routed[f"model.layers.1.mlp.{leaf}.weight"])
    torch.testing.assert_close(out["model.layers.0.mlp.shared_expert.down_proj.weight"],
                               shared["model.layers.0.mlp.down_proj.weight"] * 0.5)
    torch.testing.assert_close(out["model.layers.0.mlp.shared_expert_gate.weight"],
                               _expected_cheap_row(moe_models, "e2")[None], rtol=1e-5, atol=1e-6)
    for name in ("q", "k", "v"):
        bias = out[f"model.layers.0.self_attn.{name}_proj.bias"]
        assert bias.shape[0] == out[f"model.layers.0.self_attn.{name}_proj.weight"].shape[0] and not bias.any()


def test_an_expert_of_another_size_is_refused_before_anything_is_written(moe_models, tmp_path):
    from guiapp.checkpoints.samples import LlamaShape, write_llama

    other = write_llama(tmp_path / "other", LlamaShape(hidden=32, intermediate=96, layers=2, vocab=23),
                        dtype=torch.float32)
    path = write_config(tmp_path, {"base_model": str(moe_models["base"]), "gate_mode": "random",
                                   "experts": [{"source_model": str(moe_models["e0"])}, {"source_model": str(other)}]})
    with pytest.raises(IncompatibleModelsError, match="fine-tune|fit the base"):
        assemble(path, tmp_path / "moe")
    assert not (tmp_path / "moe").exists()


def test_shared_experts_ask_for_an_architecture_that_has_them(moe_models, tmp_path):
    path = write_config(tmp_path, {"base_model": str(moe_models["base"]), "gate_mode": "random",
                                   "architecture": "mixtral", "experts": [{"source_model": str(moe_models["e0"])}] * 2,
                                   "shared_experts": [{"source_model": str(moe_models["e1"])}]})
    with pytest.raises(RecipeError, match="Mixtral has no shared experts"):
        assemble_moe(MoeSettings(load_moe_config(path)[0], tmp_path / "moe"))
    assert not (tmp_path / "moe").exists()


def test_deepseek_moe_takes_an_ungated_shared_expert_of_its_own(moe_models, tmp_path):
    """DeepSeek-MoE's shared expert has no gate, so no prompts; it may be any fine-tune of the base."""
    path = write_config(tmp_path, {"base_model": str(moe_models["base"]), "gate_mode": "cheap_embed",
                                   "experts": [expert(moe_models, n) for n in ("e0", "e1")],
                                   "shared_experts": [{"source_model": str(moe_models["e2"])}]})
    out = assemble(path, tmp_path / "moe")
    config = json.loads((tmp_path / "moe" / "config.json").read_text())
    assert (config["architectures"], config["n_routed_experts"], config["n_shared_experts"]) == \
        (["DeepseekForCausalLM"], 2, 1)
    shared = _source(moe_models, "e2")
    for leaf in ("gate_proj", "up_proj", "down_proj"):
        assert torch.equal(out[f"model.layers.0.mlp.shared_experts.{leaf}.weight"],
                           shared[f"model.layers.0.mlp.{leaf}.weight"])
    assert out["model.layers.1.mlp.gate.weight"].shape == (2, 32)
    assert not any("shared_expert_gate" in name for name in out)


@pytest.mark.parametrize("architecture", ["mixtral", "qwen"])
def test_an_assembly_is_the_same_whatever_the_default_dtype(moe_models, tmp_path, architecture):
    """Random gates, an expert's noise, a shared expert's scaled rows and the zero biases made for Qwen: each the
    same when another thread has set torch's default dtype to bfloat16 (as transformers does while it loads)."""
    document = {"base_model": str(moe_models["base"]), "gate_mode": "random", "architecture": architecture,
                "dtype": "float32", "experts": [expert(moe_models, "e0", noise_scale=0.01), expert(moe_models, "e1")]}
    if architecture == "qwen":
        document["shared_experts"] = [expert(moe_models, "e2", residual_scale=0.5)]
    path = write_config(tmp_path, document)
    in_new_thread(lambda: assemble(path, tmp_path / "float32", seed=SEED))
    with default_dtype(torch.bfloat16):
        in_new_thread(lambda: assemble(path, tmp_path / "bfloat16", seed=SEED))
    assert (tmp_path / "bfloat16" / "model.safetensors").read_bytes() == \
        (tmp_path / "float32" / "model.safetensors").read_bytes()
