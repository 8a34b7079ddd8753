"""The size a merge with a union vocabulary (or a tokenizer donor) will write is known when it is planned: the
vocabulary is read from the tokenizers then, so the estimate is the size the real merge writes."""

from __future__ import annotations

import json
import struct

import pytest

from guiapp.jobs.estimates import estimate_merge
from guiapp.merging.merge import MergeSettings, plan_merge, run_merge
from guiapp.merging.recipe import parse_recipe
from tests.recipes.models import SPECIALS, write_model, write_tokenizer_files
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - pytest fixtures

A_TOKENS = SPECIALS + ["a", "b", "c"]
B_TOKENS = SPECIALS + ["a", "b", "d", "e", "f", "g", "h"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("union")
    return write_model(folder / "a", A_TOKENS, seed=1), write_model(folder / "b", B_TOKENS, seed=2)


def _written_tensor_bytes(folder) -> int:
    """The tensor bytes of every safetensors file in `folder`, from the files' own headers."""
    total = 0
    for path in folder.glob("*.safetensors"):
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        total += sum(end - start for key, entry in header.items() if key != "__metadata__"
                     for start, end in [entry["data_offsets"]])
    return total


def _recipe(first, second, source: str) -> str:
    return (f"merge_method: linear\nbase_model: {first}\ntokenizer_source: {source}\nmodels:\n"
            f"  - model: {first}\n    parameters: {{weight: 0.5}}\n  - model: {second}\n    parameters: {{weight: 0.5}}\n")


def test_the_union_estimate_is_the_size_the_merge_writes(pair, tmp_path):
    a, b = pair  # a has 6 tokens, b 10; their union has 11
    plan = plan_merge(parse_recipe(_recipe(a, b, "union")))
    estimate = estimate_merge(plan, "cpu", tmp_path / "out")
    outcome = run_merge(parse_recipe(_recipe(a, b, "union")), MergeSettings(tmp_path / "out"))
    assert json.loads((outcome.output / "config.json").read_text())["vocab_size"] == 11
    assert estimate.output_bytes == plan.output_bytes == _written_tensor_bytes(outcome.output)


def test_a_tokenizer_donors_size_is_known_when_planned(pair, tmp_path):
    a, b = pair
    donor = write_tokenizer_files(tmp_path / "donor", SPECIALS + [f"t{i}" for i in range(20)])
    plan = plan_merge(parse_recipe(_recipe(a, b, str(donor))))
    outcome = run_merge(parse_recipe(_recipe(a, b, str(donor))), MergeSettings(tmp_path / "out"))
    assert plan.output_bytes == _written_tensor_bytes(outcome.output)


def test_hub_models_lend_their_tokenizers_to_planning_not_their_weights(pair, hub_env, tmp_path):
    a, b = pair
    hub_env.server.add_model("org/a", a)
    hub_env.server.add_model("org/b", b)
    plan = plan_merge(parse_recipe(_recipe("org/a", "org/b", "union")))
    assert not list(hub_env.cache_dir.rglob("*.safetensors"))  # headers over range requests, no weights
    outcome = run_merge(parse_recipe(_recipe("org/a", "org/b", "union")), MergeSettings(tmp_path / "out"))
    assert plan.output_bytes == _written_tensor_bytes(outcome.output)
