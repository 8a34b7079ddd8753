"""Hostile models and texts for try and perplexity: a config.json that promises far more model than the weights
hold is refused from headers before anything is built, a model that cannot fit in memory is refused before it
is loaded, and a long text is tokenized and scored in bounded pieces."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from guiapp.errors import CheckpointError, InsufficientResourcesError
from guiapp.jobs.tryout import plan_try
from guiapp.system.explain import explain

ROOT = Path(__file__).resolve().parents[2]
# A Try of the small test model peaks below 1 GB of address space; the hostile configs would build 3 GB or more.
ADDRESS_SPACE_LIMIT = 2_000_000_000


def _with_config(model: Path, folder: Path, **changes) -> Path:
    copy = Path(shutil.copytree(model, folder))
    config = json.loads((copy / "config.json").read_text())
    config.update(changes)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


# Each would make transformers build gigabytes of weights the files do not hold (intermediate_size: 15 GB).
INFLATED = [("num_hidden_layers", 20_000), ("hidden_size", 1_000_000), ("vocab_size", 10_000_000),
            ("intermediate_size", 10_000_000)]


@pytest.mark.long
@pytest.mark.parametrize(("field", "value"), INFLATED, ids=[field for field, _ in INFLATED])
def test_config_promising_more_than_the_weights_is_refused_before_loading(field, value, causal_fp32, tmp_path,
                                                                          probe_in_cache):
    hostile = _with_config(causal_fp32, tmp_path / "hostile", **{field: value})
    with pytest.raises(CheckpointError) as refused:
        plan_try([str(hostile)], probe_result=probe_in_cache)
    explanation = explain(refused.value)
    assert field in explanation.what and str(hostile) in explanation.what and explanation.fix


@pytest.mark.slow
def test_config_with_20000_layers_ends_with_a_message_not_a_crash(causal_fp32, tmp_path, probe_in_cache):
    hostile = _with_config(causal_fp32, tmp_path / "hostile", num_hidden_layers=20_000)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))

    done = subprocess.run([sys.executable, "-m", "guiapp", "try", str(hostile), "--prompt", "the cat",
                           "--max-new-tokens", "2"], capture_output=True, text=True, timeout=180, preexec_fn=limit,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "num_hidden_layers" in done.stderr


def test_model_larger_than_memory_is_refused_before_loading(tmp_path, probe_in_cache):
    # A real safetensors file whose one tensor is far larger than any test machine's memory, stored sparse.
    vocab, hidden = 4_000_000, 16_384  # 262 GB in float32
    folder = tmp_path / "huge"
    folder.mkdir()
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [vocab, hidden],
                                                       "data_offsets": [0, vocab * hidden * 4]}}).encode()
    with open(folder / "model.safetensors", "wb") as stream:
        stream.write(len(header).to_bytes(8, "little") + header)
        stream.truncate(8 + len(header) + vocab * hidden * 4)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden, "vocab_size": vocab,
        "num_hidden_layers": 0, "intermediate_size": 8, "num_attention_heads": 1, "tie_word_embeddings": True}))
    with pytest.raises(InsufficientResourcesError) as refused:
        plan_try([str(folder)], probe_result=probe_in_cache)
    assert "memory" in str(refused.value) and explain(refused.value).fix


def test_perplexity_of_a_text_in_pieces_equals_the_whole(causal_fp32):
    # Its tokenizer splits on whitespace, so pieces cut at line ends and spaces give the same tokens as the whole.
    import torch

    from guiapp.inference.running import load_model, perplexity, resolve_sources
    from tests.tryout.models import SENTENCES

    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    text = "\n".join(SENTENCES * 6) + " " + "the cat sat on the mat " * 20
    whole = perplexity(loaded, text, window=16)
    pieces = perplexity(loaded, text, window=16, piece_characters=50)
    assert (pieces.tokens, pieces.windows) == (whole.tokens, whole.windows)
    assert pieces.perplexity == pytest.approx(whole.perplexity, rel=1e-6)


_PEAK_CHILD = """
import resource, sys, torch
from pathlib import Path
from guiapp.inference.running import load_model, perplexity, resolve_sources
from tests.tryout.models import SENTENCES
loaded = load_model(resolve_sources([sys.argv[1]])[0], torch.float32, "cpu")
text = ("\\n".join(SENTENCES) + "\\n") * int(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = perplexity(loaded, text)
print(result.tokens, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.slow
def test_perplexity_of_a_long_text_has_bounded_memory(causal_fp32):
    # 2 MB of text: tokenized at once it took about 250 MB more (a 26 MB text ended in SIGABRT at 5 GB).
    done = subprocess.run([sys.executable, "-c", _PEAK_CHILD, str(causal_fp32), "9000"], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    tokens, growth = map(int, done.stdout.split())
    assert tokens > 400_000
    assert growth < 80_000_000, f"perplexity took {growth / 1e6:.0f} MB more for {tokens:,} tokens"


@pytest.mark.parametrize("family", ["t5", "opt", "albert", "gpt2"])
def test_genuine_configurations_of_other_families_are_not_refused(family, tmp_path, probe_in_cache):
    # T5 names its layers block.N; OPT and ALBERT embed tokens narrower than their hidden size; GPT-2 says n_layer.
    import transformers

    config = {
        "t5": lambda: transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4),
        "opt": lambda: transformers.OPTConfig(vocab_size=100, hidden_size=32, word_embed_proj_dim=16,
                                              num_hidden_layers=2, ffn_dim=37, num_attention_heads=4),
        "albert": lambda: transformers.AlbertConfig(vocab_size=100, embedding_size=16, hidden_size=32,
                                                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=37),
        "gpt2": lambda: transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4),
    }[family]()
    model_class = {"t5": transformers.T5ForConditionalGeneration, "opt": transformers.OPTForCausalLM,
                   "albert": transformers.AlbertModel, "gpt2": transformers.GPT2LMHeadModel}[family]
    model_class(config).save_pretrained(tmp_path / family)
    assert plan_try([str(tmp_path / family)], probe_result=probe_in_cache).models[0].loaded_bytes > 0
