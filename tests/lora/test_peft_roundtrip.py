"""Adapters that PEFT loads and that reproduce the fine-tune; extract → apply gives the fine-tune back."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from guiapp.checkpoints.adapters import LoraAdapter
from guiapp.checkpoints.reading import open_checkpoint
from guiapp.lora.apply import ApplySettings, apply_lora
from guiapp.lora.lowrank import RankRule
from tests.lora.helpers import (
    adapter_config,
    adapter_report,
    adapter_tensors,
    extract,
    finetune,
    max_relative_difference,
    model_tensors,
)
from tests.support.lazy_import import LazyModule

transformers = pytest.importorskip("transformers")
peft = LazyModule("peft")

TOKENS = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))


def causal_logits(folder: Path, adapter: Path | None = None) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if adapter is not None:
        model = load_peft(model, adapter)
    model.eval()
    with torch.no_grad():
        return model(TOKENS).logits


def load_peft(model, adapter: Path):
    """PeftModel.from_pretrained, failing on the warnings PEFT gives for keys it missed or did not expect."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = peft.PeftModel.from_pretrained(model, adapter)
    complaints = ("adapter keys", "nexpected", "weight_tying")
    assert not [str(w.message) for w in caught if any(text in str(w.message) for text in complaints)]
    return model


def encoder_states(folder: Path, adapter: Path | None = None) -> torch.Tensor:
    model = transformers.AutoModel.from_pretrained(folder, dtype=torch.float32)
    if adapter is not None:
        model = load_peft(model, adapter)
    model.eval()
    with torch.no_grad():
        return model(input_ids=TOKENS % 128).last_hidden_state


@pytest.fixture(scope="module")
def planted_adapter(llama_base, llama_planted, tmp_path_factory) -> Path:
    return extract(llama_base, llama_planted, tmp_path_factory.mktemp("adapter") / "lora", RankRule("fixed", 8))


def test_adapter_folder_is_a_peft_lora_for_a_causal_lm(llama_base, planted_adapter):
    folder = Path(planted_adapter["output"])
    config = adapter_config(folder)
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    assert config["r"] == config["lora_alpha"] == 8 and config["rank_pattern"] == {}
    assert config["target_modules"] == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert set(config["modules_to_save"]) == {
        "lm_head", "model.embed_tokens", "model.norm",
        *(f"model.layers.{i}.{norm}" for i in range(2) for norm in ("input_layernorm", "post_attention_layernorm")),
    }
    assert config["base_model_name_or_path"] == str(llama_base.resolve())
    tensors = adapter_tensors(folder)
    assert tensors["base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"].shape == (8, 128)
    assert tensors["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"].shape == (64, 8)
    assert "base_model.model.model.norm.weight" in tensors
    card = (folder / "README.md").read_text()
    assert "library_name: peft" in card and f"base_model: {llama_base.resolve()}" in card
    report = adapter_report(folder)
    lora = [m for m in report["modules"] if m["kind"] == "lora"]
    assert len(lora) == 14
    assert all(m["rank"] == 8 and m["relative_error"] < 1e-4 and m["retained_energy"] > 0.9999 for m in lora)
    assert report["totals"]["adapter_bytes"] == (folder / "adapter_model.safetensors").stat().st_size


def test_peft_loads_the_adapter_and_reproduces_the_finetune(llama_base, llama_planted, planted_adapter):
    base_logits = causal_logits(llama_base)
    tuned_logits = causal_logits(llama_planted)
    adapted = causal_logits(llama_base, Path(planted_adapter["output"]))
    assert (base_logits - tuned_logits).abs().max() > 0.05  # the fine-tune really differs
    assert torch.allclose(adapted, tuned_logits, atol=1e-4)


def test_extract_then_apply_gives_back_the_finetune(llama_base, llama_planted, planted_adapter, tmp_path):
    summary = apply_lora(ApplySettings(str(llama_base), planted_adapter["output"], tmp_path / "full"))
    applied, tuned = model_tensors(tmp_path / "full"), model_tensors(llama_planted)
    assert max_relative_difference(applied, tuned) < 1e-5
    # norms are carried exactly
    assert torch.equal(applied["model.layers.0.input_layernorm.weight"], tuned["model.layers.0.input_layernorm.weight"])
    assert summary["changed"] == 14 and summary["replaced"] == 7
    assert json.loads((tmp_path / "full" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]


def test_on_the_fly_application_matches_the_applied_folder(llama_base, planted_adapter, tmp_path):
    apply_lora(ApplySettings(str(llama_base), planted_adapter["output"], tmp_path / "full"))
    applied = model_tensors(tmp_path / "full")
    adapter = LoraAdapter.open(planted_adapter["output"])
    with open_checkpoint(llama_base) as base:
        adapter.check_base(base.tensors, str(llama_base))
        for name in base.tensors:
            assert torch.allclose(adapter.apply_to(name, base.read(name)).float(), applied[name].float(), atol=1e-7)
        assert adapter.delta_for("model.norm.weight", (64,)) is None
        assert adapter.replacement_for("model.norm.weight") is not None
        assert adapter.delta_for("model.layers.0.self_attn.q_proj.weight", (64, 64)).dtype == torch.float32


def test_with_noise_peft_logits_stay_within_the_rank_error(llama_base, tmp_path):
    noisy = finetune(llama_base, tmp_path / "noisy", noise=0.002, shift_1d=0.0, seed=4)
    summary = extract(llama_base, noisy, tmp_path / "lora", RankRule("fixed", 4))
    worst = adapter_report(Path(summary["output"]))["totals"]["max_relative_error"]
    assert 0.01 < worst < 0.5  # the noise is really there and the planted part is captured
    tuned, base = causal_logits(noisy), causal_logits(llama_base)
    adapted = causal_logits(llama_base, Path(summary["output"]))
    apply_lora(ApplySettings(str(llama_base), summary["output"], tmp_path / "full"))
    assert torch.allclose(adapted, causal_logits(tmp_path / "full"), atol=1e-4)  # PEFT and apply agree
    # Each applied weight is exactly as far from the fine-tune as the report's rank error says…
    applied, expected, original = model_tensors(tmp_path / "full"), model_tensors(noisy), model_tensors(llama_base)
    for module in [m for m in adapter_report(Path(summary["output"]))["modules"] if m["kind"] == "lora"]:
        name = module["module"] + ".weight"
        error = (applied[name] - expected[name]).norm() / (expected[name] - original[name]).norm()
        assert float(error) == pytest.approx(module["relative_error"], rel=1e-3, abs=1e-6)
    # …and the logits move most of the way from the base's to the fine-tune's.
    assert float((adapted - tuned).norm()) < 0.25 * float((base - tuned).norm())


def test_module_ranks_go_into_rank_pattern_and_peft_builds_them(llama_base, tmp_path):
    ranks = {"q_proj": 2, "v_proj": 6}
    tuned = finetune(llama_base, tmp_path / "tuned", rank_of=lambda m: ranks.get(m.rpartition(".")[2], 4), seed=5)
    summary = extract(llama_base, tuned, tmp_path / "lora", RankRule("energy", 0.9999))
    config = adapter_config(Path(summary["output"]))
    assert config["r"] == config["lora_alpha"] == 4
    expected = {f"model.layers.{i}.self_attn.{p}": r for i in range(2) for p, r in (("q_proj", 2), ("v_proj", 6))}
    assert config["rank_pattern"] == config["alpha_pattern"] == expected
    assert torch.allclose(causal_logits(llama_base, Path(summary["output"])), causal_logits(tuned), atol=1e-4)


def test_embeddings_and_head_as_lora(llama_base, llama_planted, tmp_path):
    summary = extract(llama_base, llama_planted, tmp_path / "lora", RankRule("fixed", 8), embeddings="lora")
    folder = Path(summary["output"])
    tensors = adapter_tensors(folder)
    assert tensors["base_model.model.model.embed_tokens.lora_embedding_A"].shape == (8, 256)
    assert tensors["base_model.model.model.embed_tokens.lora_embedding_B"].shape == (64, 8)
    assert tensors["base_model.model.lm_head.lora_A.weight"].shape == (8, 64)
    assert "lm_head" not in (adapter_config(folder)["modules_to_save"] or [])
    assert torch.allclose(causal_logits(llama_base, folder), causal_logits(llama_planted), atol=1e-4)
    apply_lora(ApplySettings(str(llama_base), str(folder), tmp_path / "full"))
    assert max_relative_difference(model_tensors(tmp_path / "full"), model_tensors(llama_planted)) < 1e-5


def test_encoder_adapter_is_feature_extraction_and_keeps_bias_and_norm_changes(bert_pair, tmp_path):
    base, tuned = bert_pair
    summary = extract(base, tuned, tmp_path / "lora", RankRule("fixed", 8))
    folder = Path(summary["output"])
    config = adapter_config(folder)
    assert config["task_type"] == "FEATURE_EXTRACTION"
    assert config["lora_bias"] is True  # changed biases of LoRA modules ride along as lora_B.bias
    assert "encoder.layer.0.attention.output.LayerNorm" in config["modules_to_save"]
    assert "base_model.model.encoder.layer.1.intermediate.dense.lora_B.bias" in adapter_tensors(folder)
    assert torch.allclose(encoder_states(base, folder), encoder_states(tuned), atol=1e-4)
    apply_lora(ApplySettings(str(base), str(folder), tmp_path / "full"))
    applied, expected = model_tensors(tmp_path / "full"), model_tensors(tuned)
    assert max_relative_difference(applied, expected) < 1e-5
    for name in ("encoder.layer.0.attention.self.query.bias", "embeddings.LayerNorm.bias", "pooler.dense.bias"):
        assert torch.allclose(applied[name], expected[name], atol=1e-7)


def test_encoder_with_embedding_lora_saves_biased_modules_whole(bert_pair, tmp_path):
    base, tuned = bert_pair
    summary = extract(base, tuned, tmp_path / "lora", RankRule("fixed", 8), embeddings="lora")
    folder = Path(summary["output"])
    config = adapter_config(folder)
    assert config["lora_bias"] is False  # PEFT cannot combine lora_bias with embedding LoRAs
    assert "encoder.layer.0.attention.self.query" in config["modules_to_save"]
    assert "base_model.model.embeddings.word_embeddings.lora_embedding_A" in adapter_tensors(folder)
    assert torch.allclose(encoder_states(base, folder), encoder_states(tuned), atol=1e-4)


def test_apply_follows_peft_scaling_rslora_and_patterns(llama_base, tmp_path):
    model = transformers.AutoModelForCausalLM.from_pretrained(llama_base, dtype=torch.float32)
    config = peft.LoraConfig(
        r=4, lora_alpha=8, use_rslora=True, target_modules=["q_proj", "v_proj", "up_proj"],
        rank_pattern={"q_proj": 2}, alpha_pattern={"v_proj": 3}, task_type="CAUSAL_LM",
    )
    peft_model = peft.get_peft_model(model, config)
    generator = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    peft_model.save_pretrained(tmp_path / "peft_adapter")
    merged = {k: v.detach().clone() for k, v in peft_model.merge_and_unload().state_dict().items()}
    apply_lora(ApplySettings(str(llama_base), str(tmp_path / "peft_adapter"), tmp_path / "full"))
    applied = model_tensors(tmp_path / "full")
    for name, tensor in applied.items():
        assert torch.allclose(tensor, merged[name], atol=1e-6), name
    apply_lora(ApplySettings(str(llama_base), str(tmp_path / "peft_adapter"), tmp_path / "half", scale=0.5))
    halved, base = model_tensors(tmp_path / "half"), model_tensors(llama_base)
    name = "model.layers.1.self_attn.q_proj.weight"
    assert torch.allclose(halved[name] - base[name], 0.5 * (merged[name] - base[name]), atol=1e-6)


@pytest.mark.parametrize("embeddings", ["save", "lora"])
def test_tied_embeddings_stay_tied_in_peft_and_in_apply(embeddings, tmp_path):
    from guiapp.checkpoints.samples import write_llama  # noqa: PLC0415

    base = write_llama(tmp_path / "base", dtype=torch.float32, tie_embeddings=True)
    tuned = finetune(base, tmp_path / "tuned")
    summary = extract(base, tuned, tmp_path / "lora", RankRule("fixed", 8), embeddings=embeddings)
    folder = Path(summary["output"])
    assert adapter_config(folder)["ensure_weight_tying"] is True
    assert torch.allclose(causal_logits(base, folder), causal_logits(tuned), atol=1e-4)
    apply_lora(ApplySettings(str(base), str(folder), tmp_path / "full"))
    applied = model_tensors(tmp_path / "full")
    assert "lm_head.weight" not in applied
    assert max_relative_difference(applied, model_tensors(tuned)) < 1e-5


@pytest.mark.parametrize(("embeddings", "only"), [("save", None), ("lora", None), ("save", r"\.bias$")])
def test_gpt2_conv1d_layers_get_fan_in_fan_out_factors(embeddings, only, tmp_path):
    config = transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "base")
    base = tmp_path / "base"
    tuned = finetune(base, tmp_path / "tuned", only=only)
    summary = extract(base, tuned, tmp_path / "lora", RankRule("fixed", 8), embeddings=embeddings)
    folder = Path(summary["output"])
    adapter = adapter_config(folder)
    assert adapter["fan_in_fan_out"] is True and adapter["lora_bias"] is (embeddings == "save")
    tensors = adapter_tensors(folder)
    rank = 1 if only else 8  # biases only: rank-1 zero factors carry lora_B.bias
    if embeddings == "save":
        # Conv1D stores (in × out): lora_A is still r × in, lora_B out × r
        assert tensors["base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"].shape == (rank, 32)
        assert tensors["base_model.model.transformer.h.0.attn.c_attn.lora_B.weight"].shape == (96, rank)
    else:
        # the head tied to wte is an explicit target: PEFT ties only heads of embeddings named embed_tokens
        assert tensors["base_model.model.transformer.wte.lora_embedding_A"].shape == (8, 256)
        assert "lm_head" in adapter["target_modules"]
    assert torch.allclose(causal_logits(base, folder), causal_logits(tuned), atol=1e-4)
    apply_lora(ApplySettings(str(base), str(folder), tmp_path / "full"))
    assert max_relative_difference(model_tensors(tmp_path / "full"), model_tensors(tuned)) < 1e-5


def test_sequence_classifier_adapter_is_seq_cls_and_carries_its_head(llama_base, tmp_path):
    config = transformers.AutoConfig.from_pretrained(llama_base)
    config.num_labels, config.pad_token_id = 3, 0
    torch.manual_seed(0)
    transformers.LlamaForSequenceClassification(config).save_pretrained(tmp_path / "base")
    base = tmp_path / "base"
    tuned = finetune(base, tmp_path / "tuned", only=r"q_proj|v_proj")  # the head itself is unchanged
    folder = Path(extract(base, tuned, tmp_path / "lora", RankRule("fixed", 8))["output"])
    adapter = adapter_config(folder)
    assert adapter["task_type"] == "SEQ_CLS"
    assert "score" in adapter["modules_to_save"]  # PEFT loads the head from every SEQ_CLS adapter

    def scores(adapter_folder: Path | None) -> torch.Tensor:
        model = transformers.AutoModelForSequenceClassification.from_pretrained(base if adapter_folder else tuned)
        if adapter_folder is not None:
            model = load_peft(model, adapter_folder)
        model.eval()
        with torch.no_grad():
            return model(TOKENS).logits

    assert torch.allclose(scores(folder), scores(None), atol=1e-4)


def test_bias_only_finetunes_give_a_small_adapter_that_peft_applies(bert_pair, tmp_path):
    base = bert_pair[0]
    tuned = finetune(base, tmp_path / "bitfit", only=r"\.bias$")  # BitFit: only biases were trained
    folder = Path(extract(base, tuned, tmp_path / "lora", RankRule("fixed", 8))["output"])
    tensors = adapter_tensors(folder)
    assert tensors["base_model.model.encoder.layer.0.attention.self.query.lora_B.bias"].abs().sum() > 0
    assert not any(name.endswith("query.weight") for name in tensors)  # no weight is stored whole
    assert adapter_config(folder)["r"] == 1
    assert torch.allclose(encoder_states(base, folder), encoder_states(tuned), atol=1e-5)
    apply_lora(ApplySettings(str(base), str(folder), tmp_path / "full"))
    assert max_relative_difference(model_tensors(tmp_path / "full"), model_tensors(tuned)) < 1e-6
