"""Compatibility verdicts from headers alone, Hub ids and local folders mixed, before any weights move."""

from __future__ import annotations

import json

import pytest

from guiapp.hub.references import ModelRef
from guiapp.merging.compatibility import check_compatibility


@pytest.fixture
def published(hub_env, samples):
    server = hub_env.server
    server.add_model("org/base", samples.base)
    server.add_model("org/finetune", samples.finetune)
    server.add_model("org/big-vocab", samples.big_vocab)
    server.add_model("org/gated", samples.base, gated=True)
    return server


def _weights_sent(server) -> int:
    return sum(server.bytes_sent(repo, "model.safetensors") for repo in server.models)


def test_same_model_family_merges(published, samples):
    report = check_compatibility([ModelRef.parse(text) for text in ("org/base", "org/finetune", str(samples.base))])
    assert report.compatible, report.render_text()
    assert "can be merged" in report.render_text()
    assert _weights_sent(published) <= 2 * 100_001  # two header reads, no weights


def test_vocabulary_mismatch_is_explained(published, samples):
    report = check_compatibility([ModelRef.parse(text) for text in ("org/base", "org/big-vocab")])
    assert [p.kind for p in report.problems] == ["vocabulary"]
    problem = report.problems[0]
    assert set(problem.tensors) == {"model.embed_tokens.weight", "lm_head.weight"}
    assert "520 tokens" in problem.message and "512" in problem.message
    assert "tokenizer_source" in problem.hint
    assert problem.model == "org/big-vocab"


def test_different_sizes_name_the_tensors(published, samples):
    report = check_compatibility([ModelRef.parse(text) for text in ("org/base", str(samples.wider))])
    (problem,) = report.problems
    assert problem.kind == "shape" and problem.model == str(samples.wider)
    assert len(problem.tensors) == 3 * 2  # gate, up, down in both layers
    assert "model.layers.0.mlp.gate_proj.weight: 384×128 vs 256×128" in problem.message


def test_missing_tensors_and_tied_embeddings(published, samples):
    report = check_compatibility([ModelRef.parse(text) for text in ("org/base", str(samples.tied))])
    (problem,) = report.problems
    assert problem.kind == "missing" and problem.tensors == ("lm_head.weight",)
    assert "ties its output layer" in problem.message


def test_other_architecture(published, samples, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.safetensors").write_bytes((samples.base / "model.safetensors").read_bytes())
    config = json.loads((samples.base / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "architectures": ["MistralForCausalLM"]}))
    report = check_compatibility([ModelRef.parse(text) for text in (str(samples.base), str(other))])
    assert [p.kind for p in report.problems] == ["architecture"]
    assert "MistralForCausalLM" in report.problems[0].message


def test_unreadable_models_say_why(published):
    report = check_compatibility([ModelRef.parse(text) for text in ("org/base", "org/gated", "org/missing")])
    kinds = {p.model: p.kind for p in report.problems}
    assert kinds == {"org/gated": "unreadable", "org/missing": "unreadable"}
    text = report.render_text()
    assert "accept" in text and "org/missing" in text and not report.compatible
