"""Whole merges of generated checkpoints, from recipe to output folder, and every way they can be refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from guiapp.checkpoints.samples import LlamaShape, llama_config, llama_tensors, write_checkpoint, write_llama
from guiapp.errors import (
    CheckpointError,
    IncompatibleModelsError,
    JobCancelled,
    NonFiniteResultError,
    OutputError,
    RecipeError,
)
from guiapp.merging.merge import MergeSettings, plan_merge, run_merge
from guiapp.progress import CancelToken, Progress
from tests.engine.helpers import fingerprint, leftovers, load_folder, recipe
from tests.support import warm_cli

LAYER_TENSOR = "model.layers.1.mlp.up_proj.weight"


def _merge(text: str, out: Path, **settings):
    return run_merge(recipe(text), MergeSettings(out, **settings))


@pytest.fixture
def conversions(monkeypatch) -> list[int]:
    """The sizes of the tensors the merge converts to its compute dtype (`_to_compute`), recorded as it does."""
    import guiapp.merging.merge as merge_module  # noqa: PLC0415

    converted: list[int] = []
    convert = merge_module._to_compute
    monkeypatch.setattr(merge_module, "_to_compute",
                        lambda plan, tensor, device: converted.append(tensor.numel()) or convert(plan, tensor, device))
    return converted


def _bf16_model_in_blocks(folder: Path, seed: int) -> Path:
    """A one-layer bf16 Llama whose embeddings span three merge blocks, the last a short one."""
    from guiapp.merging.merge import BLOCK_ELEMENTS  # noqa: PLC0415

    shape = LlamaShape(layers=1, vocab=BLOCK_ELEMENTS // 64 * 2 + 5)
    return write_checkpoint(folder, llama_tensors(shape, torch.Generator().manual_seed(seed)),
                            llama_config(shape, torch.bfloat16), torch.bfloat16)


def test_linear_bf16_matches_hand_computation_and_leaves_inputs_alone(llama_trio, tmp_path):
    base, one, _ = llama_trio
    before = {p: fingerprint(p) for p in (base, one)}
    out = tmp_path / "out"
    outcome = _merge(f"merge_method: linear\nmodels:\n  - model: {base}\n    parameters: {{weight: 0.25}}\n"
                     f"  - model: {one}\n    parameters: {{weight: 0.5}}\n", out)
    a, b, merged = load_folder(base), load_folder(one), load_folder(out)
    assert merged.keys() == a.keys()
    for name in a:
        # Computed in float32 and rounded once (torch.lerp does both in one pass for two bf16 inputs).
        expected = torch.lerp(a[name], b[name], 0.5 / 0.75)
        assert merged[name].dtype == torch.bfloat16
        assert torch.equal(merged[name], expected), name
        hand = (0.25 * a[name].double() + 0.5 * b[name].double()) / 0.75
        assert torch.allclose(merged[name].double(), hand, rtol=2**-8, atol=1e-9), name
    assert {p: fingerprint(p) for p in (base, one)} == before
    assert sorted(p.name for p in out.iterdir()) == [".mergesmith-output.json", "README.md", "config.json",
                                                     "mergesmith_recipe.yml", "model.safetensors"]
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert yaml.safe_load((out / "mergesmith_recipe.yml").read_text())["merge_method"] == "linear"
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "mergesmith" in card and "merge_method: linear" in card
    assert outcome.summary()["tensors"] == len(a)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_task_arithmetic_in_other_dtypes_with_sharded_inputs_and_outputs(tmp_path, dtype):
    shape = LlamaShape(layers=2)
    base = write_llama(tmp_path / "base", shape, dtype=dtype, seed=0, shards=2)
    tuned = write_llama(tmp_path / "tuned", shape, dtype=dtype, seed=5, shards=3)
    out = tmp_path / "out"
    _merge(f"merge_method: task_arithmetic\nbase_model: {base}\nmodels:\n  - model: {tuned}\n"
           f"    parameters: {{weight: 0.5}}\nparameters: {{lambda: 0.8}}\n", out, shard_bytes=40_000)
    b, x, merged = load_folder(base), load_folder(tuned), load_folder(out)
    assert len(list(out.glob("model-*-of-*.safetensors"))) > 1 and (out / "model.safetensors.index.json").is_file()
    for name in b:
        expected = (b[name].float() + 0.8 * 0.5 * (x[name].float() - b[name].float())).to(dtype)
        assert torch.equal(merged[name], expected), name


def test_dtype_and_out_dtype(llama_trio, tmp_path):
    base, one, _ = llama_trio
    _merge(f"merge_method: linear\ndtype: float32\nout_dtype: float16\nmodels:\n  - model: {base}\n"
           f"    parameters: {{weight: 1}}\n  - model: {one}\n    parameters: {{weight: 1}}\n", tmp_path / "o")
    merged = load_folder(tmp_path / "o")
    assert {t.dtype for t in merged.values()} == {torch.float16}
    assert json.loads((tmp_path / "o" / "config.json").read_text())["torch_dtype"] == "float16"


def test_frankenmerge_slices_renumber_layers_and_take_outer_tensors_from_first_and_last(tmp_path):
    shape = LlamaShape(layers=3)
    first = write_llama(tmp_path / "a", shape, seed=1)
    second = write_llama(tmp_path / "b", shape, seed=2)
    out = tmp_path / "franken"
    _merge(f"""
merge_method: passthrough
slices:
  - sources:
      - model: {first}
        layer_range: [0, 2]
  - sources:
      - model: {second}
        layer_range: [1, 3]
""", out)
    a, b, merged = load_folder(first), load_folder(second), load_folder(out)
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 4
    assert torch.equal(merged["model.layers.1.mlp.up_proj.weight"], a["model.layers.1.mlp.up_proj.weight"])
    assert torch.equal(merged["model.layers.2.mlp.up_proj.weight"], b["model.layers.1.mlp.up_proj.weight"])
    assert torch.equal(merged["model.layers.3.self_attn.q_proj.weight"], b["model.layers.2.self_attn.q_proj.weight"])
    assert torch.equal(merged["model.embed_tokens.weight"], a["model.embed_tokens.weight"])
    assert torch.equal(merged["model.norm.weight"], b["model.norm.weight"])
    assert torch.equal(merged["lm_head.weight"], b["lm_head.weight"])
    assert "model.layers.4.mlp.up_proj.weight" not in merged


def test_gradients_and_filters_follow_the_layers(llama_trio, tmp_path):
    base, one, _ = llama_trio  # three layers: t = 0, 0.5, 1
    out = tmp_path / "g"
    _merge(f"""
merge_method: linear
parameters:
  normalize: false
models:
  - model: {base}
    parameters:
      weight: [{{filter: mlp, value: [1.0, 0.0]}}, {{value: 1.0}}]
  - model: {one}
    parameters:
      weight: 0.0
""", out)
    a, merged = load_folder(base), load_folder(out)
    for layer, weight in enumerate([1.0, 0.5, 0.0]):
        name = f"model.layers.{layer}.mlp.down_proj.weight"
        assert torch.equal(merged[name], (weight * a[name].float()).to(torch.bfloat16)), name
        attention = f"model.layers.{layer}.self_attn.q_proj.weight"
        assert torch.equal(merged[attention], a[attention])
    # Outside the layers t = 0: the first value of the gradient
    assert torch.equal(merged["lm_head.weight"], a["lm_head.weight"])


def test_per_model_filters_use_the_sources_own_layer_numbers(tmp_path):
    shape = LlamaShape(layers=4)
    first, second = write_llama(tmp_path / "a", shape, seed=1), write_llama(tmp_path / "b", shape, seed=2)
    out = tmp_path / "o"
    _merge(f"""
merge_method: linear
slices:
  - sources:
      - model: {first}
        layer_range: [1, 3]
        parameters:
          weight: [{{filter: "layers.1.", value: 1.0}}, {{value: 0.0}}]
      - model: {second}
        layer_range: [1, 3]
        parameters:
          weight: [{{filter: "layers.1.", value: 0.0}}, {{value: 1.0}}]
""", out)
    a, b, merged = load_folder(first), load_folder(second), load_folder(out)
    # The first output layer is each source's layer 1: the filter "layers.1." matches there.
    assert torch.equal(merged["model.layers.0.mlp.up_proj.weight"], a["model.layers.1.mlp.up_proj.weight"])
    assert torch.equal(merged["model.layers.1.mlp.up_proj.weight"], b["model.layers.2.mlp.up_proj.weight"])


def test_validation_errors_name_what_is_wrong(llama_trio, tmp_path):
    base, one, two = llama_trio
    cases = [
        (f"merge_method: dare_tie\nbase_model: {base}\nmodels:\n  - model: {one}\n", 'Did you mean "dare_ties"',
         RecipeError),
        (f"merge_method: linear\nmodels:\n  - model: {one}\n  - model: {two}\n    parameters: {{weight: 1}}\n",
         f"`weight` is missing for {one}", RecipeError),
        (f"merge_method: ties\nbase_model: {base}\nmodels:\n  - model: {one}\n    parameters: {{weight: 1, density: -5}}\n",
         "`density` of .* is -5", RecipeError),
        (f"merge_method: ties\nmodels:\n  - model: {one}\n    parameters: {{weight: 1}}\n", "needs a base model",
         RecipeError),
        (f"merge_method: passthrough\nslices:\n  - sources:\n      - model: {one}\n        layer_range: [0, 9]\n",
         "goes past the end: the model has 3 layers", RecipeError),
        (f"merge_method: ties\nbase_model: {base}\nslices:\n  - sources:\n      - model: {one}\n        layer_range: [0, 3]\n"
         f"        parameters: {{weight: 1}}\n", "base model .* is not among the inputs of slice 1", RecipeError),
        (f"merge_method: linear\nmodels:\n  - model: {one}\n    parameters: {{weight: 1}}\n"
         f"  - model: {two}\n    parameters: {{weight: -1}}\n", "weights add up to zero", RecipeError),
        (f"merge_method: linear\nmodels:\n  - model: {tmp_path / 'nowhere'}\n    parameters: {{weight: 1}}\n",
         "does not exist", CheckpointError),
    ]
    for text, message, kind in cases:
        with pytest.raises(kind, match=message):
            plan_merge(recipe(text))
    assert leftovers(tmp_path) == []


def test_shape_and_vocabulary_mismatches(tmp_path):
    base = write_llama(tmp_path / "base", LlamaShape(layers=2, vocab=256), seed=0)
    bigger_vocab = write_llama(tmp_path / "big", LlamaShape(layers=2, vocab=260), seed=1)
    wider = write_llama(tmp_path / "wide", LlamaShape(layers=2, hidden=96), seed=1)
    with pytest.raises(IncompatibleModelsError, match="shapes") as caught:
        plan_merge(recipe(f"merge_method: task_arithmetic\nbase_model: {base}\nmodels:\n  - model: {wider}\n"
                          f"    parameters: {{weight: 1}}\n"))
    assert "256×96 vs 256×64" in str(caught.value)  # the compatibility check's words, as `hub check` says it

    text = f"merge_method: task_arithmetic\nbase_model: {base}\nmodels:\n  - model: {bigger_vocab}\n    parameters: {{weight: 0.5}}\n"
    with pytest.raises(IncompatibleModelsError, match="has a vocabulary of 260 tokens") as caught:
        plan_merge(recipe(text))
    assert caught.value.remedy.changes == {"tokenizer_source": "base"}

    out = tmp_path / "aligned"
    run_merge(recipe(text + "tokenizer_source: base\n"), MergeSettings(out))
    b, x, merged = load_folder(base), load_folder(bigger_vocab), load_folder(out)
    assert merged["model.embed_tokens.weight"].shape == (256, 64)
    expected = (b["lm_head.weight"].float() + 0.5 * (x["lm_head.weight"][:256].float() - b["lm_head.weight"].float()))
    assert torch.equal(merged["lm_head.weight"], expected.to(torch.bfloat16))
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 256


def test_a_tied_model_lends_its_embeddings_as_output_head(tmp_path):
    shape = LlamaShape(layers=2)
    untied = write_llama(tmp_path / "untied", shape, seed=1)
    tied = write_llama(tmp_path / "tied", shape, seed=2, tie_embeddings=True)
    out = tmp_path / "o"
    _merge(f"merge_method: linear\nbase_model: {tied}\nmodels:\n  - model: {untied}\n    parameters: {{weight: 1}}\n"
           f"  - model: {tied}\n    parameters: {{weight: 1}}\n", out)
    a, t, merged = load_folder(untied), load_folder(tied), load_folder(out)
    expected = ((a["lm_head.weight"].float() + t["model.embed_tokens.weight"].float()) / 2).to(torch.bfloat16)
    assert torch.equal(merged["lm_head.weight"], expected)
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False


def test_bert_shaped_models_merge_and_integer_buffers_are_copied(tmp_path):
    def bert(folder, seed):
        generator = torch.Generator().manual_seed(seed)
        tensors = {"bert.embeddings.word_embeddings.weight": torch.randn(50, 16, generator=generator),
                   "bert.embeddings.position_ids": torch.arange(32).unsqueeze(0),
                   "bert.pooler.dense.weight": torch.randn(16, 16, generator=generator)}
        for i in range(2):
            tensors[f"bert.encoder.layer.{i}.attention.self.query.weight"] = torch.randn(16, 16, generator=generator)
            tensors[f"bert.encoder.layer.{i}.attention.self.query.bias"] = torch.randn(16, generator=generator)
            tensors[f"bert.encoder.layer.{i}.output.LayerNorm.weight"] = torch.randn(16, generator=generator)
        config = {"architectures": ["BertModel"], "model_type": "bert", "num_hidden_layers": 2, "vocab_size": 50}
        return write_checkpoint(folder, tensors, config, torch.float32)

    first, second = bert(tmp_path / "a", 1), bert(tmp_path / "b", 2)
    out = tmp_path / "o"
    _merge(f"merge_method: passthrough\nslices:\n  - sources:\n      - model: {first}\n        layer_range: [0, 2]\n"
           f"  - sources:\n      - model: {second}\n        layer_range: [1, 2]\n", out)
    a, b, merged = load_folder(first), load_folder(second), load_folder(out)
    assert torch.equal(merged["bert.embeddings.position_ids"], a["bert.embeddings.position_ids"])
    assert torch.equal(merged["bert.encoder.layer.2.attention.self.query.bias"], b["bert.encoder.layer.1.attention.self.query.bias"])
    assert torch.equal(merged["bert.embeddings.word_embeddings.weight"], a["bert.embeddings.word_embeddings.weight"])
    assert torch.equal(merged["bert.pooler.dense.weight"], b["bert.pooler.dense.weight"])
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 3


def test_nan_in_an_input_stops_the_job_naming_the_tensor(tmp_path):
    shape = LlamaShape(layers=1)
    generator = torch.Generator().manual_seed(0)
    tensors = llama_tensors(shape, generator)
    tensors["model.layers.0.mlp.up_proj.weight"][3, 4] = float("nan")
    broken = write_checkpoint(tmp_path / "broken", tensors, llama_config(shape, torch.float32), torch.float32)
    good = write_llama(tmp_path / "good", shape, dtype=torch.float32)
    with pytest.raises(NonFiniteResultError, match="model.layers.0.mlp.up_proj.weight") as caught:
        _merge(f"merge_method: linear\nmodels:\n  - model: {good}\n    parameters: {{weight: 1}}\n"
               f"  - model: {broken}\n    parameters: {{weight: 1}}\n", tmp_path / "out")
    assert str(broken) in str(caught.value)
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_fp16_overflow_is_caught_and_bfloat16_offered(tmp_path):
    shape = LlamaShape(layers=1)
    model = write_llama(tmp_path / "m", shape, dtype=torch.float16)
    with pytest.raises(NonFiniteResultError, match="too large to be stored as float16") as caught:
        _merge(f"merge_method: linear\nparameters: {{normalize: false}}\nmodels:\n  - model: {model}\n"
               f"    parameters: {{weight: 1.0e+7}}\n", tmp_path / "out")
    assert caught.value.remedy.changes == {"out_dtype": "bfloat16"}
    assert not (tmp_path / "out").exists()


def test_cancel_midway_leaves_nothing_and_the_next_job_works(llama_trio, tmp_path):
    base, one, _ = llama_trio
    text = (f"merge_method: linear\nmodels:\n  - model: {base}\n    parameters: {{weight: 1}}\n"
            f"  - model: {one}\n    parameters: {{weight: 1}}\n")
    token = CancelToken()
    seen = []

    def on_event(event):
        if event.stage == "Merging" and event.done:
            seen.append(event.item)
            if event.done == 5:
                token.cancel()

    with pytest.raises(JobCancelled):
        run_merge(recipe(text), MergeSettings(tmp_path / "out"), Progress(on_event=on_event, cancel=token))
    assert len(seen) == 5
    assert list(tmp_path.iterdir()) == []
    run_merge(recipe(text), MergeSettings(tmp_path / "out"))
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_existing_output_is_kept_unless_overwrite(llama_trio, tmp_path):
    base, one, _ = llama_trio
    text = f"merge_method: linear\nmodels:\n  - model: {one}\n    parameters: {{weight: 1}}\n"
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    for overwrite in (False, True):  # a folder Mergesmith did not write is never replaced
        with pytest.raises(OutputError, match="already exists and was not made by Mergesmith"):
            _merge(text, out, overwrite=overwrite)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    earlier = tmp_path / "earlier"
    _merge(text, earlier)
    with pytest.raises(OutputError, match="already exists"):
        _merge(text, earlier)
    _merge(text, earlier, overwrite=True)  # an earlier output is replaced when asked
    assert (earlier / "model.safetensors").is_file()
    assert leftovers(tmp_path) == []


def _cli(*args, cwd=None):
    """`python -m guiapp ARGS` in a process of its own, forked from the warm CLI (torch already imported)."""
    return warm_cli.shared().run([str(arg) for arg in args], cwd=cwd, timeout=120)


def test_cli_merge_end_to_end(llama_trio, tmp_path):
    base, one, two = llama_trio
    recipe_file = tmp_path / "recipe.yml"
    recipe_file.write_text(f"merge_method: task_arithmetic\nbase_model: {base}\nmodels:\n  - model: {one}\n"
                           f"    parameters: {{weight: 0.5}}\n  - model: {two}\n    parameters: {{weight: 0.5}}\n")
    dry = _cli("merge", recipe_file, tmp_path / "out", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "valid" in dry.stdout and not (tmp_path / "out").exists()
    done = _cli("merge", recipe_file, tmp_path / "out", "--out-shard-size", "50KB")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "model.safetensors.index.json").is_file()
    again = _cli("merge", recipe_file, tmp_path / "out")
    assert again.returncode == 1 and "already exists" in " ".join(again.stderr.split())
    assert "Traceback" not in again.stderr
    usage = _cli("merge", recipe_file)
    assert usage.returncode == 2
    recipe_file.write_text("merge_method: linear\nmodels: [\n")
    bad = _cli("merge", recipe_file, tmp_path / "other")
    assert bad.returncode == 1 and "not valid YAML" in " ".join(bad.stderr.split())
    assert not (tmp_path / "other").exists()


def test_ctrl_c_in_the_cli_leaves_nothing(tmp_path):
    """Ctrl-C lands mid-merge by construction: the job holds after its second tensor (MERGESMITH_TEST_PAUSE) until
    the test has signalled, so the merge cannot end first however fast the machine is."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415

    from guiapp.cli.process import PAUSE_VARIABLE  # noqa: PLC0415

    model = write_llama(tmp_path / "model", LlamaShape(layers=2), dtype=torch.float32)
    recipe_file = tmp_path / "recipe.yml"
    recipe_file.write_text(f"merge_method: ties\nbase_model: {model}\nmodels:\n  - model: {model}\n"
                           f"    parameters: {{weight: 1, density: 0.5}}\n")
    never = tmp_path / "never-released"  # the signal, not this file, ends the pause

    def as_in_a_terminal() -> None:
        # A test run started in the background (`pytest &`, nohup, some CI runners) ignores SIGINT, and a child
        # inherits that; a terminal's Ctrl-C reaches a program whose SIGINT is at its default.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    process = subprocess.Popen([sys.executable, "-m", "guiapp", "merge", str(recipe_file), str(tmp_path / "out")],
                               stderr=subprocess.PIPE, text=True, preexec_fn=as_in_a_terminal,
                               env={**os.environ, PAUSE_VARIABLE: f"Merging:2:{never}"})
    try:
        for line in process.stderr:
            if line.startswith("Paused after step 2 of Merging"):
                process.send_signal(signal.SIGINT)
                break
        _, rest = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 1
    assert "Interrupted" in rest and "Traceback" not in rest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "recipe.yml"]


def test_tokenizer_and_generation_files_come_from_the_base(tmp_path):
    base = write_llama(tmp_path / "base", LlamaShape(layers=1), seed=0)
    other = write_llama(tmp_path / "other", LlamaShape(layers=1), seed=1)
    (base / "tokenizer.json").write_text('{"from": "base"}')
    (base / "generation_config.json").write_text('{"max_new_tokens": 7}')
    (other / "tokenizer.json").write_text('{"from": "other"}')
    out = tmp_path / "out"
    _merge(f"merge_method: task_arithmetic\nbase_model: {base}\nmodels:\n  - model: {other}\n    parameters: {{weight: 1}}\n", out)
    assert json.loads((out / "tokenizer.json").read_text()) == {"from": "base"}
    assert json.loads((out / "generation_config.json").read_text()) == {"max_new_tokens": 7}


def test_demo_generates_sample_models_and_merges_them(tmp_path):
    done = _cli("demo", "--out", tmp_path / "demo")
    assert done.returncode == 0, done.stderr
    merged = tmp_path / "demo" / "merged"
    assert (merged / "model.safetensors").is_file() and (merged / "mergesmith_recipe.yml").is_file()
    assert yaml.safe_load((merged / "mergesmith_recipe.yml").read_text())["merge_method"] == "ties"


def test_large_tensors_merged_in_blocks_match_and_are_checked(tmp_path):
    from guiapp.merging.merge import BLOCK_ELEMENTS  # noqa: PLC0415
    from guiapp.merging.methods import METHODS  # noqa: PLC0415
    from guiapp.merging.methods.base import MergeContext  # noqa: PLC0415

    shape = LlamaShape(layers=1, vocab=BLOCK_ELEMENTS // 64 * 3 + 5)  # embeddings span several blocks
    first = write_llama(tmp_path / "a", shape, dtype=torch.float16, seed=1)
    second = write_llama(tmp_path / "b", shape, dtype=torch.float16, seed=2)
    out = tmp_path / "out"
    _merge(f"merge_method: linear\nmodels:\n  - model: {first}\n    parameters: {{weight: 0.3}}\n"
           f"  - model: {second}\n    parameters: {{weight: 0.9}}\n", out)
    a, b, merged = load_folder(first), load_folder(second), load_folder(out)
    name = "model.embed_tokens.weight"
    assert a[name].numel() > 3 * BLOCK_ELEMENTS
    # Blocks give exactly what the method gives on the whole tensor, which is the weighted mean (to rounding).
    whole = METHODS["linear"].merge_stored(MergeContext(name, [a[name], b[name]], None,
                                                        [{"weight": 0.3}, {"weight": 0.9}], {"normalize": True},
                                                        ["a", "b"], torch.Generator()))
    assert torch.equal(merged[name], whole)
    hand = (0.3 * a[name].float() + 0.9 * b[name].float()) / 1.2
    assert torch.allclose(merged[name].float(), hand, rtol=1e-3, atol=1e-6)

    with pytest.raises(NonFiniteResultError, match=f"{name}.*too large to be stored as float16"):
        _merge(f"merge_method: linear\nparameters: {{normalize: false}}\nmodels:\n  - model: {first}\n"
               f"    parameters: {{weight: 1.0e+7}}\n", tmp_path / "overflow")
    tensors = load_folder(first)
    tensors[name][-1, -1] = float("nan")
    broken = write_checkpoint(tmp_path / "nan", tensors, llama_config(shape, torch.float16))
    with pytest.raises(NonFiniteResultError, match=f"{name}.*{broken}"):
        _merge(f"merge_method: linear\nmodels:\n  - model: {broken}\n    parameters: {{weight: 1}}\n", tmp_path / "n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "nan", "out"]


def test_large_copies_are_written_as_stored_converted_when_asked_and_checked(tmp_path):
    from guiapp.merging.merge import BLOCK_ELEMENTS  # noqa: PLC0415

    shape = LlamaShape(layers=1, vocab=BLOCK_ELEMENTS // 64 * 3 + 5)  # embeddings span several blocks
    tensors = llama_tensors(shape, torch.Generator().manual_seed(3))
    name = "model.embed_tokens.weight"
    tensors[name][7, :4] = torch.tensor([-0.0, 6e-8, 65504.0, -1e-7])  # signed zero, subnormals
    model = write_checkpoint(tmp_path / "a", tensors, llama_config(shape, torch.float16), torch.float16)
    stored = load_folder(model)[name]
    copy = f"merge_method: passthrough\nslices:\n  - sources:\n      - model: {model}\n        layer_range: [0, 1]\n"
    _merge(copy, tmp_path / "same")
    assert torch.equal(load_folder(tmp_path / "same")[name].view(torch.int16), stored.view(torch.int16))
    _merge(copy + "dtype: bfloat16\n", tmp_path / "bf16")
    assert torch.equal(load_folder(tmp_path / "bf16")[name].view(torch.int16), stored.bfloat16().view(torch.int16))

    broken = load_folder(model)
    broken[name][-1, -1] = float("nan")
    broken_model = write_checkpoint(tmp_path / "nan", broken, llama_config(shape, torch.float16))
    with pytest.raises(NonFiniteResultError, match=f"{name}.*{broken_model}.*already contains NaN"):
        _merge(copy.replace(str(model), str(broken_model)), tmp_path / "n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "bf16", "nan", "same"]



def test_two_model_linear_in_bf16_merges_as_stored_and_rounds_once(tmp_path, conversions):
    one, two = _bf16_model_in_blocks(tmp_path / "one", 4), _bf16_model_in_blocks(tmp_path / "two", 5)
    a, b = load_folder(one), load_folder(two)
    name = "model.embed_tokens.weight"
    exact = (0.6 * a[name].double() + 0.4 * b[name].double()) / 1.0  # correctly rounded into bf16 below
    for extra, out in (("", tmp_path / "plain"), ("dtype: bfloat16\n", tmp_path / "bf16")):
        conversions.clear()
        _merge(f"merge_method: linear\nmodels:\n  - model: {one}\n    parameters: {{weight: 0.6}}\n"
               f"  - model: {two}\n    parameters: {{weight: 0.4}}\n{extra}", out)
        assert conversions == []  # no tensor, whole or in blocks, goes through a conversion to float32 and back
        merged = load_folder(out)[name]
        # Computed in float32 and rounded once: the correctly rounded value nearly everywhere, and everywhere within
        # bf16's rounding of the exact value plus float32's error on the inputs (where they cancel out).
        assert int(torch.count_nonzero(merged != exact.to(torch.bfloat16))) <= merged.numel() // 1000
        error = (merged.double() - exact).abs()
        assert bool((error <= exact.abs() * 2**-8 + (a[name].double().abs() + b[name].double().abs()) * 2**-22).all())

    # Weights that neither add up to one nor are normalised go through the float32 path's operations a chunk at a
    # time: no block converted, the float32 path's bits.
    conversions.clear()
    _merge(f"merge_method: linear\nmodels:\n  - model: {one}\n    parameters: {{weight: 0.6}}\n"
           f"  - model: {two}\n    parameters: {{weight: 0.6}}\nparameters: {{normalize: false}}\n", tmp_path / "sum")
    assert conversions == []
    assert torch.equal(load_folder(tmp_path / "sum")[name], (a[name].float() * 0.6).add_(b[name].float(), alpha=0.6).bfloat16())


def test_task_arithmetic_in_bf16_merges_as_stored_with_the_float32_result(tmp_path, conversions):
    folders = [_bf16_model_in_blocks(tmp_path / name, seed) for name, seed in (("base", 3), ("one", 4), ("two", 5))]
    base, one, two = (load_folder(folder) for folder in folders)
    _merge(f"merge_method: task_arithmetic\nbase_model: {folders[0]}\nmodels:\n"
           f"  - model: {folders[1]}\n    parameters: {{weight: 0.7}}\n"
           f"  - model: {folders[2]}\n    parameters: {{weight: -0.2}}\nparameters: {{lambda: 1.5}}\n", tmp_path / "out")
    assert conversions == []  # no tensor, whole or in blocks, goes through a conversion to float32 and back
    merged = load_folder(tmp_path / "out")
    for name in ("model.embed_tokens.weight", "model.norm.weight"):
        b = base[name].float()
        by_hand = (one[name].float() - b).mul_(0.7).add_((two[name].float() - b).mul_(-0.2)).mul_(1.5).add_(b)
        assert torch.equal(merged[name], by_hand.bfloat16())


def test_nearswap_in_bf16_merges_as_stored_with_the_float32_result(tmp_path, conversions):
    from guiapp.merging.methods.nearswap import nearswap  # noqa: PLC0415

    folders = [_bf16_model_in_blocks(tmp_path / name, seed) for name, seed in (("base", 3), ("one", 4))]
    base, one = (load_folder(folder) for folder in folders)
    _merge(f"merge_method: nearswap\nbase_model: {folders[0]}\nmodels:\n  - model: {folders[1]}\n"
           "parameters: {t: 0.01}\n", tmp_path / "out")
    assert conversions == []  # no tensor, whole or in blocks, goes through a conversion to float32 and back
    merged = load_folder(tmp_path / "out")
    for name in ("model.embed_tokens.weight", "model.norm.weight"):
        assert torch.equal(merged[name], nearswap(0.01, base[name].float(), one[name].float()).bfloat16())


def test_float32_inputs_are_merged_as_they_are_not_in_chunks(tmp_path, conversions):
    # Chunks save converting narrow inputs to float32; inputs stored in float32 need no conversion, and copying
    # them into chunk buffers would only add a pass (task arithmetic 2.63 against 2.33 ms per million entries).
    from guiapp.merging.merge import BLOCK_ELEMENTS  # noqa: PLC0415

    shape = LlamaShape(layers=1, vocab=BLOCK_ELEMENTS // 64 * 2 + 5)
    folders = [write_checkpoint(tmp_path / name, llama_tensors(shape, torch.Generator().manual_seed(seed)),
                                llama_config(shape, torch.float32), torch.float32)
               for name, seed in (("base", 3), ("one", 4))]
    numel = sum(t.numel() for t in load_folder(folders[0]).values())
    for method, parameters in (("task_arithmetic", "    parameters: {weight: 0.5}\n"), ("nearswap", "parameters: {t: 0.01}\n")):
        conversions.clear()
        _merge(f"merge_method: {method}\nbase_model: {folders[0]}\nmodels:\n  - model: {folders[1]}\n{parameters}",
               tmp_path / method)
        assert sum(conversions) == 2 * numel  # every entry of both inputs through the float32 path


def test_passthrough_at_scale_one_is_a_copy_written_as_stored(tmp_path, conversions):
    from guiapp.merging.merge import BLOCK_ELEMENTS  # noqa: PLC0415

    model = _bf16_model_in_blocks(tmp_path / "a", 4)
    stored = load_folder(model)
    copy = f"merge_method: passthrough\nslices:\n  - sources:\n      - model: {model}\n        layer_range: [0, 1]\n"
    small = sum(t.numel() for t in stored.values() if t.numel() <= BLOCK_ELEMENTS)
    # Without a dtype, and with the dtype the model is stored in (as recipes from model cards say it):
    for text, out in ((copy, tmp_path / "copy"), (copy + "dtype: bfloat16\n", tmp_path / "bf16")):
        conversions.clear()
        _merge(text, out)
        assert sum(conversions) == small  # the large tensors' blocks are written as read, not conversions and back
        copied = load_folder(out)
        assert all(torch.equal(copied[name].view(torch.int16), stored[name].view(torch.int16)) for name in stored)

    conversions.clear()
    _merge(copy.replace("layer_range: [0, 1]\n", "layer_range: [0, 1]\n        parameters: {scale: 2.0}\n"),
           tmp_path / "scaled")
    assert sum(conversions) == sum(t.numel() for t in stored.values())  # a scale is computed
    name = "model.embed_tokens.weight"
    assert torch.equal(load_folder(tmp_path / "scaled")[name], (stored[name].float() * 2).bfloat16())
