"""Tensors merged in blocks are read, merged and written a block at a time (after the passes a method with a survey,
like TIES, makes over them): the output is byte for byte what the whole-tensor path writes, and the merge's peak
memory does not grow with the size of the largest tensor."""

from __future__ import annotations

import math
import textwrap
import weakref
from pathlib import Path

import pytest
import torch

import guiapp.merging.merge as merge_module
from guiapp.checkpoints.samples import LlamaShape, llama_config, llama_tensors, write_checkpoint, write_llama
from guiapp.checkpoints.sources import ModelReader
from guiapp.merging.merge import BLOCK_ELEMENTS, MergeSettings, plan_merge, run_merge, streams_in_blocks
from guiapp.merging.methods._selection import LargestK
from tests.engine.helpers import recipe
from tests.support.memory import warm_run_measuring_memory

_EXTRA = "model.layers.0.mlp.up_proj.bias"  # a tensor only the base has: slerp copies it


def _model(folder: Path, shape: LlamaShape, seed: int, extra: bool = False) -> Path:
    tensors = llama_tensors(shape, torch.Generator().manual_seed(seed))
    if extra:  # larger than a block, so that the copy goes through in blocks too
        tensors[_EXTRA] = torch.randn(BLOCK_ELEMENTS * 2 + 3, generator=torch.Generator().manual_seed(seed))
    return write_checkpoint(folder, tensors, llama_config(shape, torch.bfloat16), torch.bfloat16, shards=2)


def _output_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.safetensors*"))}


@pytest.mark.long
def test_streamed_output_is_byte_identical_to_the_whole_tensor_path(tmp_path, monkeypatch):
    vocab = BLOCK_ELEMENTS // 64 * 3 + 5  # embeddings span four blocks, the last one partial
    base = _model(tmp_path / "base", LlamaShape(layers=1, vocab=vocab), seed=0, extra=True)
    bigger = _model(tmp_path / "bigger", LlamaShape(layers=1, vocab=vocab + 7), seed=1)  # cut to the base's rows
    small_vocab = BLOCK_ELEMENTS // 64 - 100  # padded from the base from within the first block to the end
    smaller = _model(tmp_path / "smaller", LlamaShape(layers=1, vocab=small_vocab), seed=2)
    texts = {
        "task_arithmetic": f"merge_method: task_arithmetic\nbase_model: {base}\ntokenizer_source: base\nmodels:\n"
                           f"  - model: {bigger}\n    parameters: {{weight: 0.7}}\n"
                           f"  - model: {smaller}\n    parameters: {{weight: 0.4}}\ndtype: float16\n",
        "slerp": f"merge_method: slerp\nbase_model: {base}\ntokenizer_source: base\nmodels:\n  - model: {base}\n"
                 f"  - model: {bigger}\nparameters: {{t: 0.3}}\n",
        # bfloat16 inputs make many changes of equal size, so the cut falls among ties that span blocks.
        "ties": f"merge_method: ties\nbase_model: {base}\nmodels:\n"
                f"  - model: {bigger}\n    parameters: {{weight: 0.7, density: 0.4}}\n"
                f"  - model: {smaller}\n    parameters: {{weight: 0.5, density: 0.75}}\n"
                f"tokenizer_source: base\n",
        "breadcrumbs_ties": f"merge_method: breadcrumbs_ties\nbase_model: {base}\ntokenizer_source: base\nmodels:\n"
                            f"  - model: {bigger}\n    parameters: {{weight: 1.0, density: 0.5, gamma: 0.02}}\n"
                            f"  - model: {smaller}\n    parameters: {{weight: 0.6, density: 0.9, gamma: 0.1}}\n",
        # RAM's rule for each entry looks at the inputs' entries there alone; RAM+ counts over the blocks first.
        "ram": f"merge_method: ram\nbase_model: {base}\ntokenizer_source: base\nmodels:\n  - model: {bigger}\n"
               f"  - model: {smaller}\nparameters: {{epsilon: 0.002}}\n",
        "ramplus_tl": f"merge_method: ramplus_tl\nbase_model: {base}\ntokenizer_source: base\nmodels:\n"
                      f"  - model: {bigger}\n  - model: {smaller}\nparameters: {{epsilon: 0.002, r: 0.5, alpha: 0.7}}\n",
        # SCE counts where the changes differ, ranks their variance, sums each model's kept changes, then merges.
        "sce": f"merge_method: sce\nbase_model: {base}\ntokenizer_source: base\nmodels:\n  - model: {bigger}\n"
               f"  - model: {smaller}\nparameters: {{select_topk: 0.3}}\n",
        "sce_all": f"merge_method: sce\nbase_model: {base}\ntokenizer_source: base\nmodels:\n  - model: {bigger}\n"
                   f"  - model: {smaller}\n",
    }
    plans = {method: plan_merge(recipe(text)) for method, text in texts.items()}
    streamed = {method: {t.name: t for t in plan.tasks if streams_in_blocks(plan, t)} for method, plan in plans.items()}
    embeddings = streamed["task_arithmetic"]["model.embed_tokens.weight"]
    assert [item.rows for item in embeddings.inputs] == [vocab, small_vocab, None]  # the base comes last
    assert embeddings.inputs[1].pad_from is not None
    copied = streamed["slerp"][_EXTRA]
    assert copied.copy and math.prod(copied.shape) > 2 * BLOCK_ELEMENTS
    assert "model.embed_tokens.weight" not in streamed["slerp"]  # slerp needs whole tensors
    ranked = streamed["ties"]["model.embed_tokens.weight"]
    assert merge_module.tensor_survey(plans["ties"], ranked).passes_left == 2  # a sample, then a count
    assert streamed["breadcrumbs_ties"].keys() == streamed["task_arithmetic"].keys()
    assert streamed["ram"].keys() == streamed["ramplus_tl"].keys() == streamed["task_arithmetic"].keys()
    boosted = merge_module.tensor_survey(plans["ramplus_tl"], streamed["ramplus_tl"]["model.embed_tokens.weight"])
    assert boosted.passes_left == 1  # each model's overlap counted, then the merge
    assert streamed["sce"].keys() == streamed["sce_all"].keys() == streamed["task_arithmetic"].keys()
    selecting = merge_module.tensor_survey(plans["sce"], streamed["sce"]["model.embed_tokens.weight"])
    assert selecting.passes_left == 3 and selecting.samples_next_pass  # a sample, a count, the changes' sums

    for method, text in texts.items():
        run_merge(recipe(text), MergeSettings(tmp_path / f"streamed-{method}", shard_bytes=8_000_000))
    # An unlucky sample: each selection's first bracket holds only the sample's largest value, so every ranked
    # tensor needs a third pass, inserted before its merge pass.
    missed, misses = weakref.WeakSet(), []
    real_bracket = LargestK._draw_bracket

    def unlucky_once(self):
        if self in missed or self._sample_values is None:
            return real_bracket(self)
        missed.add(self)
        misses.append(self._k)
        return self._sample_values.max(), self._sample_values.max()

    with monkeypatch.context() as patch:
        patch.setattr(LargestK, "_draw_bracket", unlucky_once)
        run_merge(recipe(texts["ties"]), MergeSettings(tmp_path / "unlucky-ties", shard_bytes=8_000_000))
        assert len(misses) >= 4  # two models' rankings of each tensor larger than a block
        run_merge(recipe(texts["sce"]), MergeSettings(tmp_path / "unlucky-sce", shard_bytes=8_000_000))
        assert len(misses) >= 6  # and SCE's ranking of each
    monkeypatch.setattr(merge_module, "streams_in_blocks", lambda plan, task: False)
    for method, text in texts.items():
        run_merge(recipe(text), MergeSettings(tmp_path / f"whole-{method}", shard_bytes=8_000_000))
        whole_files = _output_bytes(tmp_path / f"whole-{method}")
        assert len(whole_files) > 2  # sharded: blocks are written across shard files
        for streamed_run in [f"streamed-{method}"] + ([f"unlucky-{method}"] if method in ("ties", "sce") else []):
            streamed_files = _output_bytes(tmp_path / streamed_run)
            assert streamed_files.keys() == whole_files.keys()
            for name, data in whole_files.items():
                assert streamed_files[name] == data, (streamed_run, name)


def _merge_code(recipe_file: Path, output: Path) -> str:
    """The program a memory case runs: the merge of `recipe_file` into `output`, nothing else."""
    return textwrap.dedent(f"""
        from pathlib import Path
        from guiapp.merging.merge import MergeSettings, run_merge
        from guiapp.merging.recipe import parse_recipe
        run_merge(parse_recipe(Path({str(recipe_file)!r}).read_text()), MergeSettings(Path({str(output)!r})))
    """)


@pytest.fixture(scope="module")
def tied_models(tmp_path_factory) -> dict[int, list[Path]]:
    """Three models (seeds 1, 2, 3) for each vocabulary, whose tied embeddings are 32 MB and 164 MB in bfloat16
    and the rest a few MB; written once for the methods that merge them."""
    folder = tmp_path_factory.mktemp("tied")
    return {vocab: [write_llama(folder / f"{seed}-{vocab}", LlamaShape(hidden=1024, intermediate=256, layers=1,
                                                                       heads=8, kv_heads=8, vocab=vocab),
                                seed=seed, tie_embeddings=True) for seed in (1, 2, 3)]
            for vocab in (16_000, 80_000)}


@pytest.mark.long
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="samples RssAnon from /proc")
@pytest.mark.parametrize("method", ["linear", "ties", "sce"])
def test_peak_memory_does_not_grow_with_the_largest_tensor(tmp_path, method, tied_models):
    peaks = {}
    for vocab, (one, two, three) in tied_models.items():
        recipe_file = tmp_path / f"recipe-{vocab}.yml"
        base, density = (f"base_model: {one}\n", ", density: 0.3") if method == "ties" else ("", "")
        if method == "sce":  # two fine-tunes of `three`, whose changes' variance SCE ranks
            base = f"base_model: {three}\nparameters: {{select_topk: 0.5}}\n"
        recipe_file.write_text(f"merge_method: {method}\n{base}models:\n  - model: {one}\n    parameters: {{weight: 0.5}}\n"
                               f"  - model: {two}\n    parameters: {{weight: 0.5{density}}}\n")
        # Forked from the warm CLI: both runs start from the same imported pages, so their difference is the merge's.
        peaks[vocab] = warm_run_measuring_memory(_merge_code(recipe_file, tmp_path / f"out-{vocab}")).peak_private
    growth = peaks[80_000] - peaks[16_000]
    # Whole tensors would add both inputs, the result and the write behind: 4 × 131 MB more (the loop that read
    # whole tensors measured +393 MB; TIES on whole tensors, +1.2 GB). Blocks add nothing; the bound leaves room for what sampling a loaded
    # machine's allocator adds (a full-suite run next to another once read more than 40 MB).
    assert growth < 150 * 2**20, (peaks, growth)


_VOCAB = BLOCK_ELEMENTS // 64 * 3 + 5  # embeddings that span four blocks


def _models(tmp_path: Path, names: list[str]) -> list[Path]:
    """One small model per name (seeds 0, 1, …), whose embeddings span four blocks."""
    return [_model(tmp_path / name, LlamaShape(layers=1, vocab=_VOCAB), seed=seed) for seed, name in enumerate(names)]


def _ties_of_one_fine_tune(tmp_path: Path) -> tuple[int, str]:
    """(the vocabulary, a TIES recipe) for a base and one fine-tune."""
    base, tuned = _models(tmp_path, ["base", "tuned"])
    return _VOCAB, (f"merge_method: ties\nbase_model: {base}\nmodels:\n"
                    f"  - model: {tuned}\n    parameters: {{weight: 1.0, density: 0.5}}\n")


def test_the_pass_that_draws_the_sample_converts_only_the_sampled_entries(tmp_path, monkeypatch):
    _, text = _ties_of_one_fine_tune(tmp_path)
    plan = plan_merge(recipe(text))
    ranked = [t for t in plan.tasks if streams_in_blocks(plan, t) and merge_module.tensor_survey(plan, t)]
    one_pass = sum(math.prod(t.shape) * len(t.inputs) for t in ranked)
    assert one_pass >= 2 * 3 * BLOCK_ELEMENTS
    counted, real_convert, real_count = [], merge_module._to_compute, merge_module._count_block

    def count_block(*args):
        monkeypatch.setattr(merge_module, "_to_compute", lambda p, tensor, d: counted.append(tensor.numel())
                            or real_convert(p, tensor, d))
        try:
            real_count(*args)
        finally:
            monkeypatch.setattr(merge_module, "_to_compute", real_convert)

    monkeypatch.setattr(merge_module, "_count_block", count_block)
    run_merge(recipe(text), MergeSettings(tmp_path / "out"))
    # The sample pass and the counting pass convert about 1/64 + 1 of the inputs, not 2 whole passes of them.
    assert one_pass <= sum(counted) < 1.1 * one_pass


def _sce_of_two_fine_tunes(tmp_path: Path) -> tuple[int, str]:
    """(the vocabulary, an SCE recipe) for a base and two fine-tunes."""
    base, tuned, other = _models(tmp_path, ["base", "tuned", "other"])
    return _VOCAB, (f"merge_method: sce\nbase_model: {base}\nparameters: {{select_topk: 0.4}}\nmodels:\n"
                    f"  - model: {tuned}\n  - model: {other}\n")


@pytest.mark.parametrize(("recipe_of", "models", "full_passes"),
                         [(_ties_of_one_fine_tune, 2, 2), (_sce_of_two_fine_tunes, 3, 3)])
def test_the_pass_that_draws_the_sample_reads_an_eighth_of_each_tensor(
    tmp_path, monkeypatch, recipe_of, models, full_passes
):
    vocab, text = recipe_of(tmp_path)
    rows_read: dict[str, int] = {}
    real_read_rows = ModelReader.read_rows

    def read_rows(self, name, rows):
        if name == "model.embed_tokens.weight":
            rows_read[self.folder] = rows_read.get(self.folder, 0) + len(rows)
        return real_read_rows(self, name, rows)

    counted_rows, real_count = [], merge_module._count_block

    def count_block(plan, piece, tensors, *args):
        counted_rows.append((len(piece.rows), tensors[0].shape[0]))
        return real_count(plan, piece, tensors, *args)

    monkeypatch.setattr(ModelReader, "read_rows", read_rows)
    monkeypatch.setattr(merge_module, "_count_block", count_block)
    run_merge(recipe(text), MergeSettings(tmp_path / "out"))
    # Each model: an eighth of the rows to draw the sample, all of them in each other pass (TIES: count and merge;
    # SCE: count, sum the kept changes, merge).
    assert len(rows_read) == models
    for rows in rows_read.values():
        assert full_passes * vocab <= rows <= (full_passes + 1 / 8) * vocab + 4, rows_read
    assert all(named == held for named, held in counted_rows), counted_rows  # each block holds its piece's rows
