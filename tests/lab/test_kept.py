"""The inputs kept in memory between trials: a trial reads nothing from disk once they are kept, gives bit for bit
the score of a trial that reads everything again (for methods of every kind, after another candidate was merged
from the same kept tensors), and a budget too small for all of them keeps what fits and reads the rest."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from guiapp.errors import CheckpointError
from guiapp.lab.trial import Evaluator, Material

EVERYTHING = 1 << 40


def _documents(planted, method: str) -> tuple[dict, dict]:
    """Two candidates of one recipe with `method`: the one scored twice and another merged in between."""
    if method == "slerp":
        def make(t):
            return {"merge_method": "slerp", "base_model": str(planted.base), "dtype": "float32", "parameters": {"t": t},
                    "models": [{"model": str(planted.base)}, {"model": str(planted.animals)}]}
        return make(0.3), make(0.8)
    if method == "linear":
        def make(w):
            return {"merge_method": "linear", "dtype": "float32",
                    "models": [{"model": str(planted.animals), "parameters": {"weight": w}},
                               {"model": str(planted.computers), "parameters": {"weight": 1 - w}}]}
        return make(0.3), make(0.8)
    extra = {"density": 0.6} if method in ("ties", "dare_ties", "della") else {}
    if method == "della":
        extra["epsilon"] = 0.1

    def make(w):
        return {"merge_method": method, "base_model": str(planted.base), "dtype": "float32",
                "models": [{"model": str(planted.animals), "parameters": {"weight": w, **extra}},
                           {"model": str(planted.computers), "parameters": {"weight": 1 - w, **extra}}]}
    return make(0.3), make(0.8)


@pytest.mark.parametrize("method", ["task_arithmetic", "ties", "dare_ties", "della", "slerp", "linear"])
def test_a_trial_on_kept_inputs_scores_as_one_that_reads_them_again(planted, method):
    scored, other = _documents(planted, method)
    material = Material(planted.mixed_text.read_text())
    kept = Evaluator(scored, keep_bytes=EVERYTHING)
    rereading = Evaluator(scored, keep_bytes=0)
    try:
        first = kept.score(scored, material)
        kept.score(other, material)
        again = kept.score(scored, material)
        fresh = rereading.score(scored, material)
        assert first.error is None and first.perplexity == again.perplexity == fresh.perplexity
        assert kept._inputs.kept_bytes > 0 and rereading._inputs.kept_bytes == 0
    finally:
        kept.close()
        rereading.close()


def _spoil(folder) -> None:
    """Overwrite the weights of the safetensors files in `folder` (their headers kept) with huge numbers, as another
    program might."""
    for path in folder.glob("*.safetensors"):
        with path.open("r+b") as stream:
            header = struct.unpack("<Q", stream.read(8))[0]
            json.loads(stream.read(header))
            size = path.stat().st_size - 8 - header
            stream.write(b"\x7f" * size)


def test_once_kept_the_inputs_are_not_read_from_disk_again(planted, tmp_path):
    models = {name: shutil.copytree(getattr(planted, name), tmp_path / name) for name in ("base", "animals", "computers")}
    document = {"merge_method": "task_arithmetic", "base_model": str(models["base"]), "dtype": "float32",
                "models": [{"model": str(models["animals"]), "parameters": {"weight": 0.4}},
                           {"model": str(models["computers"]), "parameters": {"weight": 0.6}}]}
    material = Material(planted.mixed_text.read_text())
    kept, rereading = Evaluator(document, keep_bytes=EVERYTHING), Evaluator(document, keep_bytes=0)
    try:
        first = kept.score(document, material)
        assert rereading.score(document, material).perplexity == first.perplexity
        for folder in models.values():
            _spoil(folder)
        assert kept.score(document, material).perplexity == first.perplexity
        with pytest.raises(CheckpointError, match="changed by another program"):  # it reads the files again
            rereading.score(document, material)
    finally:
        kept.close()
        rereading.close()


def test_a_budget_too_small_for_every_input_keeps_what_fits_and_reads_the_rest(planted):
    document = _documents(planted, "task_arithmetic")[0]
    material = Material(planted.mixed_text.read_text())
    whole = Evaluator(document, keep_bytes=EVERYTHING)
    try:
        expected = whole.score(document, material).perplexity
        needed = whole._inputs.kept_bytes
    finally:
        whole.close()
    partial = Evaluator(document, keep_bytes=needed // 2)
    try:
        assert partial.score(document, material).perplexity == expected
        assert 0 < partial._inputs.kept_bytes <= needed // 2
        assert partial.score(document, material).perplexity == expected
    finally:
        partial.close()


def test_by_default_the_kept_inputs_take_at_most_half_the_models_size(planted):
    # Three inputs kept whole held three models besides the one scored: a 1 GB search took 2.5 times the memory of
    # one merge plus one perplexity run of its result.
    document = _documents(planted, "task_arithmetic")[0]
    evaluator = Evaluator(document)
    try:
        assert evaluator.score(document, Material(planted.mixed_text.read_text())).error is None
        model_bytes = sum(t.numel() * t.element_size() for t in evaluator.loaded.model.state_dict().values())
        assert 0 < evaluator._inputs.kept_bytes <= model_bytes // 2
    finally:
        evaluator.close()
