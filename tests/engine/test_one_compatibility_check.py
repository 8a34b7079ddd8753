"""One compatibility check: merge planning, the Hub pre-download check and the LoRA pair check (`pair_problem`,
which the LoRA page's check calls through guiapp.jobs, and extraction) give the same verdict, in the same words,
for the same two models."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.checkpoints.sources import read_headers
from guiapp.errors import IncompatibleModelsError
from guiapp.hub.references import ModelRef
from guiapp.lora.extract import ExtractionSettings, extract_lora, pair_problem
from guiapp.merging.compatibility import check_compatibility
from guiapp.merging.merge import plan_merge
from tests.engine.helpers import recipe

SHAPE = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=256)
DROPPED = "model.layers.1.mlp.up_proj.weight"


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    base = write_llama(root / "base", SHAPE, seed=0, dtype=torch.float32)
    tuned = write_llama_finetune(root / "tuned", base, seed=1)
    lacking = write_llama_finetune(root / "lacking", base, seed=2)
    tensors = load_file(lacking / "model.safetensors")
    del tensors[DROPPED]
    save_file(tensors, lacking / "model.safetensors", metadata={"format": "pt"})
    return {
        "identical pair": (base, tuned),
        "unrelated shapes": (base, write_llama(root / "wide", replace(SHAPE, hidden=96), seed=3)),
        "different vocabulary": (base, write_llama(root / "vocab", replace(SHAPE, vocab=260), seed=4)),
        "missing tensors": (base, lacking),
    }


def _plan_verdict(base, other) -> tuple[str | None, list[str]]:
    """(the refusal's message or None, the plan's warnings) for merging `other` onto `base`."""
    text = f"merge_method: task_arithmetic\nbase_model: {base}\nmodels:\n  - model: {other}\n    parameters: {{weight: 1}}\n"
    try:
        return None, plan_merge(recipe(text)).warnings
    except IncompatibleModelsError as error:
        return str(error), []


def _extraction_refusal(base, other, out) -> str | None:
    try:
        extract_lora(ExtractionSettings(str(base), str(other), out))
    except IncompatibleModelsError as error:
        return str(error)
    return None


@pytest.mark.parametrize("case", ["identical pair", "unrelated shapes", "different vocabulary", "missing tensors"])
def test_the_three_checks_agree(pairs, case, tmp_path):
    base, other = pairs[case]
    refs = ModelRef.parse(str(base)), ModelRef.parse(str(other))
    hub = check_compatibility(refs)
    refusal, warnings = _plan_verdict(base, other)
    pair = pair_problem(read_headers(refs[0]), read_headers(refs[1]), str(refs[0]), str(refs[1]))

    if case == "identical pair":
        assert hub.compatible and refusal is None and pair is None and not warnings
        return
    (problem,) = hub.problems
    assert problem.kind == {"unrelated shapes": "shape", "different vocabulary": "vocabulary",
                            "missing tensors": "missing"}[case]
    assert pair.message == problem.message and pair.hint == problem.hint
    assert _extraction_refusal(base, other, tmp_path / "extracted") == problem.message
    if problem.kind == "missing":  # merging uses what the models share: the plan warns in the same words
        assert refusal is None and problem.message in warnings and DROPPED in problem.message
    else:
        assert refusal == problem.message
