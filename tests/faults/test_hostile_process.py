"""Fault classes "inputs" and "process" at the command line: recipes and text that cost too much, flag values out
of range, odd output encodings and paths, signals and a deleted working folder.

Costs are compared by how they scale (ten times the input must not cost a hundred times the CPU time), not against
a clock: the machine running the tests is shared and noisy.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from guiapp.engine.merge import plan_merge
from guiapp.engine.recipe import parse_recipe
from guiapp.engine.samples import llama_config
from tests.faults.conftest import SMALL

# Ten times the input costs about ten times as much when the work is linear, a hundred times when quadratic.
LINEAR_RATIO_LIMIT = 40
HANG_SECONDS = 150  # a child still running after this is hanging, however loaded the machine


def _cpu_seconds(work: Callable[[], object], repeats: int = 3) -> float:
    """The least CPU time (of `repeats` runs) `work` takes: other programs' load hardly shows in it."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return max(best, 1e-4)


# --- planning stays linear in the number of slices ---------------------------------------------------------


def _deep_model(folder: Path, layers: int) -> Path:
    folder.mkdir(parents=True)
    save_file({f"model.layers.{i}.mlp.weight": torch.zeros(1) for i in range(layers)}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(llama_config(SMALL, torch.float32)))
    return folder


def _one_layer_slices(model: Path, count: int) -> str:
    return "merge_method: passthrough\nslices:\n" + "".join(
        f"  - sources:\n      - model: {model}\n        layer_range: [{i}, {i + 1}]\n" for i in range(count))


def test_planning_thousands_of_one_layer_slices_is_linear(tmp_path, seen):
    costs = {}
    for count in (500, 5000):
        recipe = parse_recipe(_one_layer_slices(_deep_model(tmp_path / str(count), count), count))
        plans = []
        costs[count] = _cpu_seconds(lambda recipe=recipe, plans=plans: plans.append(plan_merge(recipe)))
        assert len(plans[-1].tasks) == count
    ratio = costs[5000] / costs[500]
    assert ratio < LINEAR_RATIO_LIMIT, f"5,000 slices cost {ratio:.0f} times what 500 did: {costs}"
    seen("inputs", "5,000 one-layer slices of a 5,000-layer model",
         f"planned; 10 times the slices cost {ratio:.0f} times the time")


# --- explain is linear in what it is given -----------------------------------------------------------------

# Repeated to 80 KB, each runs into the longest search of some catalogue pattern or of explain's own parsing.
TEXT_SHAPES = {
    "dotted words": "a.", "dotted words and spaces": "torch.nn.a ", "a long word": "x", "underscored words": "_cpu",
    "spaces": " ", "tabs": "\t", "blank lines": "\n", "status 429": "429 ", "status 403": "403 ",
    "Input type (": "Input type (", "Target modules": "Target modules ", "size mismatch": "size mismatch for a.",
    "quoted words": '"a', "paths": "/a.b", "Error words": "Error.",
}


def _explain_cost(text: str) -> float:
    from guiapp.system.explain import explain  # noqa: PLC0415

    return _cpu_seconds(lambda: (explain(ValueError(text)).render_text(), explain(text).render_text()))


@pytest.mark.parametrize("shape", list(TEXT_SHAPES))
def test_explain_with_80_kb_of_one_shape(shape, seen):
    unit = TEXT_SHAPES[shape]
    small, large = ((unit * (size // len(unit) + 1))[:size] for size in (8_000, 80_000))
    ratio = _explain_cost(large) / _explain_cost(small)
    assert ratio < LINEAR_RATIO_LIMIT, f"80 KB of {shape!r} cost {ratio:.0f} times what 8 KB did"
    seen("inputs", f"explain with 80 KB of {shape}", f"explained; 10 times the text cost {ratio:.0f} times the time")


# --- flag values out of range -------------------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--seed", "1180591620717411303424", "0 to 18446744073709551615"),
    ("--seed", "-1", "0 to 18446744073709551615"),
    ("--out-shard-size", "1e400", "1 byte to 1000TB"),
    ("--out-shard-size", "inf", "1 byte to 1000TB"),
    ("--out-shard-size", "nan", "1 byte to 1000TB"),
    ("--out-shard-size", "-5GB", "1 byte to 1000TB"),
    ("--out-shard-size", "0", "1 byte to 1000TB"),
    ("--out-shard-size", "1e-9", "1 byte to 1000TB"),
])
def test_a_flag_value_out_of_range_is_a_usage_error(flag, value, said, trio, tmp_path, warm_cli, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(f"merge_method: dare_ties\nbase_model: {trio.base}\nmodels:\n  - model: {trio.one}\n"
                      f"    parameters: {{weight: 1, density: 0.5}}\n")
    done = warm_cli.run(["merge", str(recipe), str(tmp_path / "out"), f"{flag}={value}"], timeout=HANG_SECONDS)
    assert done.returncode == 2, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert flag in done.stderr and said in done.stderr and "internal problem" not in done.stderr
    assert not (tmp_path / "out").exists()
    seen("inputs", f"merge {flag} {value}", done.stderr.strip().splitlines()[-1])


def test_try_seed_out_of_range_is_a_usage_error(trio, warm_cli, seen):
    done = warm_cli.run(["try", str(trio.one), "--prompt", "hi", "--sample", "--seed", str(2**70)],
                        timeout=HANG_SECONDS)
    assert done.returncode == 2 and "--seed" in done.stderr and "0 to 18446744073709551615" in done.stderr
    seen("inputs", "try --seed 2^70", done.stderr.strip().splitlines()[-1])
