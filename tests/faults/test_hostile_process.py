"""Fault classes "inputs" and "process" at the command line: recipes and text that cost too much, flag values out
of range, odd output encodings and paths, signals and a deleted working folder.

Costs are compared by how they scale (ten times the input must not cost a hundred times the CPU time), not against
a clock: the machine running the tests is shared and noisy.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from guiapp.checkpoints.samples import llama_config
from guiapp.cli.process import PAUSE_VARIABLE
from guiapp.merging.merge import plan_merge
from guiapp.merging.recipe import recipe_from_dict
from tests.faults.conftest import SMALL
from tests.faults.harness import cli_explanation, leftovers, looks_finished
from tests.support.hub_server import make_hostile
from tests.support.warm_cli import ROOT

# Ten times the input costs about ten times as much when the work is linear, a hundred times when quadratic.
LINEAR_RATIO_LIMIT = 40
HANG_SECONDS = 150  # a child still running after this is hanging, however loaded the machine


def _cpu_seconds(work: Callable[[], object], repeats: int = 3) -> float:
    """The least CPU time (of `repeats` runs) this thread spends in `work`: other programs' load and this process's
    other threads hardly show in it. The garbage collector is held off meanwhile: its passes walk the whole test
    process (torch, other tests' objects), so their cost says nothing of how the work grows (with them, planning
    5,000 slices cost 10 to 44 times 500 from run to run; without, 9.6 to 9.9)."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.thread_time()
            work()
            best = min(best, time.thread_time() - start)
        finally:
            gc.enable()
    return max(best, 1e-4)


# --- planning stays linear in the number of slices ---------------------------------------------------------


def _deep_model(folder: Path, layers: int) -> Path:
    folder.mkdir(parents=True)
    save_file({f"model.layers.{i}.mlp.weight": torch.zeros(1) for i in range(layers)}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(llama_config(SMALL, torch.float32)))
    return folder


def _one_layer_slices(model: Path, count: int) -> dict:
    """The recipe's document as its YAML reads (parsing 5,000 slices' YAML takes seconds, and is not what is timed)."""
    return {"merge_method": "passthrough",
            "slices": [{"sources": [{"model": str(model), "layer_range": [i, i + 1]}]} for i in range(count)]}


@pytest.mark.long
def test_planning_thousands_of_one_layer_slices_is_linear(tmp_path, seen):
    costs = {}
    for count in (500, 5000):
        recipe = recipe_from_dict(_one_layer_slices(_deep_model(tmp_path / str(count), count), count))
        plans = []
        # The small plan first, the least of three runs; the large once: more runs could only lower the ratio.
        costs[count] = _cpu_seconds(lambda recipe=recipe, plans=plans: plans.append(plan_merge(recipe)),
                                    repeats=3 if count == 500 else 1)
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


def _explain_cost(text: str, repeats: int) -> float:
    from guiapp.system.explain import explain  # noqa: PLC0415

    return _cpu_seconds(lambda: (explain(ValueError(text)).render_text(), explain(text).render_text()), repeats)


@pytest.mark.parametrize("shape", list(TEXT_SHAPES))
def test_explain_with_80_kb_of_one_shape(shape, seen):
    unit = TEXT_SHAPES[shape]
    small, large = ((unit * (size // len(unit) + 1))[:size] for size in (8_000, 80_000))
    # The small text first (the least of three runs: its short time is the noisy one), the large once: more runs
    # of it could only lower its time, and so the ratio, never raise it.
    small_cost = _explain_cost(small, repeats=3)
    ratio = _explain_cost(large, repeats=1) / small_cost
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


# --- the process: signals, the working folder, output encodings ---------------------------------------------


def _ties(trio) -> str:
    return (f"merge_method: ties\nbase_model: {trio.base}\nmodels:\n"
            f"  - model: {trio.one}\n    parameters: {{weight: 0.5, density: 0.5}}\n"
            f"  - model: {trio.two}\n    parameters: {{weight: 0.5, density: 0.5}}\n")


def _program_env(**extra: str) -> dict[str, str]:
    """The environment of a real `mergesmith` program started from this checkout, wherever its working folder."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def test_sighup_during_a_cli_merge_leaves_nothing(trio, tmp_path, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_ties(trio))
    out = tmp_path / "merged"
    # Held after its 5th tensor until signalled, so the hang-up lands mid-merge however fast the machine is.
    process = subprocess.Popen([sys.executable, "-m", "guiapp", "merge", str(recipe), str(out)],
                               stderr=subprocess.PIPE, text=True,
                               env=_program_env(**{PAUSE_VARIABLE: f"Merging:5:{tmp_path / 'never-released'}"}))
    for line in process.stderr:
        if line.startswith("Paused after step 5 of Merging"):
            break
    assert process.poll() is None, "the merge ended before the terminal closed"
    assert leftovers(tmp_path), "the merge had not started writing"
    process.send_signal(signal.SIGHUP)  # the terminal closed
    code = process.wait(timeout=HANG_SECONDS)
    said = process.stderr.read()
    process.stderr.close()
    assert code == 1, f"exit {code}: {said[-2000:]}"
    assert leftovers(tmp_path) == [] and not out.exists() and not looks_finished(out)
    seen("process", "SIGHUP (terminal closed) during a CLI merge", said.strip().splitlines()[-1])


def test_starting_in_a_deleted_working_folder(trio, tmp_path, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_ties(trio))
    out = tmp_path / "merged"
    gone = tmp_path / "gone"
    gone.mkdir()
    # The shell enters the folder, removes it, then becomes `mergesmith`: it starts with no working folder.
    done = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone),
                           sys.executable, "-m", "guiapp", "merge", str(recipe), str(out)],
                          capture_output=True, text=True, timeout=HANG_SECONDS, env=_program_env())
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr and "working folder" in done.stderr
    assert looks_finished(out) and leftovers(tmp_path) == []
    seen("process", "started in a deleted working folder",
         next(line for line in done.stderr.splitlines() if "working folder" in line))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_recipe_saved_as_utf_16_or_32_is_read(encoding, trio, tmp_path, warm_cli, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_bytes(_ties(trio).encode(encoding))  # with its byte-order mark, as Windows editors save it
    done = warm_cli.run(["merge", str(recipe), str(tmp_path / "out"), "--dry-run"], timeout=HANG_SECONDS)
    assert done.returncode == 0 and "The recipe is valid" in done.stdout, done.stderr[-2000:]
    seen("inputs", f"a recipe saved as {encoding.upper()} with a BOM", "read; the recipe is valid")


def test_a_recipe_in_utf_16_without_a_mark_names_the_encoding(trio, tmp_path, warm_cli, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_bytes(_ties(trio).encode("utf-16-le"))
    done = warm_cli.run(["merge", str(recipe), str(tmp_path / "out"), "--dry-run"], timeout=HANG_SECONDS)
    title, what = cli_explanation(done.stderr)
    assert done.returncode == 1 and "UTF-16" in what and "UTF-8" in done.stderr and "binary data" not in what
    seen("inputs", "a recipe saved as UTF-16 without a BOM", f"{title}: {what}")


@pytest.mark.long
@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_output_survives_any_stdout_encoding_and_odd_path_bytes(encoding, trio, tmp_path, seen):
    recipe = tmp_path / "recipe-é.yml"
    recipe.write_text(_ties(trio))
    env = _program_env(PYTHONIOENCODING=encoding, MERGESMITH_CACHE_DIR=str(tmp_path / "cache"))
    folder = os.fsencode(tmp_path)

    def run(*args: str | bytes) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "guiapp", *args], capture_output=True, timeout=HANG_SECONDS,
                              env=env)

    merged = run("merge", os.fsencode(recipe), folder + b"/out-\xff")
    assert merged.returncode == 0 and b"Traceback" not in merged.stderr, merged.stderr[-2000:]
    assert looks_finished(Path(os.fsdecode(folder + b"/out-\xff")))
    planned = run("merge", os.fsencode(recipe), folder + b"/plan-\xff\xe2\x82\xac", "--dry-run")
    assert planned.returncode == 0 and b"The recipe is valid" in planned.stdout, planned.stderr[-2000:]
    failed = run("merge", folder + b"/missing-\xff.yml", folder + b"/out2")
    assert failed.returncode == 1 and b"Traceback" not in failed.stderr and b"missing-" in failed.stderr
    seen("process", f"PYTHONIOENCODING={encoding}, output folder b'out-\\xff'", "merged; messages printed")


def test_an_output_under_proc_is_a_system_folder(trio, tmp_path, warm_cli, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_ties(trio))
    done = warm_cli.run(["merge", str(recipe), "/proc/self/out"], timeout=HANG_SECONDS)
    title, what = cli_explanation(done.stderr)
    assert done.returncode == 1 and "/proc" in what and "system folder" in what and "missing" not in what
    seen("outputs", "output folder under /proc", f"{title}: {what}")


# --- the job history keeps a failed job bounded ---------------------------------------------------------------


def test_history_keeps_a_failed_billion_laughs_job_bounded(tmp_path, warm_cli, seen):
    # A failed job as the window records it: its spec holds the recipe's settings (here an object whose text
    # would expand the shared lists), its explanation the error, whose details can be as long as a log.
    script = textwrap.dedent("""
        import dataclasses, sys, time
        from guiapp.jobs.history import JobRecord, save_history, load_history

        @dataclasses.dataclass
        class Settings:
            weight: object

        value = ["lol"] * 9
        for _ in range(10):
            value = [value] * 9
        explanation = {"title": "The recipe has a problem", "what": "The recipe expands to more than 100,000 values",
                       "why": "", "fix": "", "raw": "Traceback (most recent call last):\\n" + "x" * 40_000_000}
        record = JobRecord(key="1", title="Merge", kind="merge", spec={"recipe": Settings(value)},
                           status="failed", created=time.time(), explanation=explanation)
        save_history([record])
        (loaded,) = load_history()
        print(loaded.status, loaded.explanation["title"], len(loaded.explanation["raw"]) < 1_000_000)
    """)
    env = {**os.environ, "MERGESMITH_CONFIG_DIR": str(tmp_path / "config")}
    done = warm_cli.run([], code=script, env=env, timeout=HANG_SECONDS, address_space=3_000_000_000)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["failed", "The", "recipe", "has", "a", "problem", "True"], done.stdout
    assert (tmp_path / "config" / "jobs_history.json").stat().st_size < 1_000_000
    seen("inputs", "job history of a failed billion-laughs job", "saved bounded, loaded back")


# --- a Hub that redirects where it must not -------------------------------------------------------------------


@pytest.mark.parametrize(("case", "redirect", "said"), [
    ("redirect loop", "loop", "redirects"),
    ("redirect to file://", "file:///etc/passwd", "/etc/passwd, which is not a web address"),
])
def test_a_hub_redirect_is_named(case, redirect, said, hub_env, trio, capsys, seen):
    from guiapp.__main__ import main  # noqa: PLC0415 - after hub_env has pointed huggingface_hub at the test Hub

    hub_env.server.add_model("org/model", trio.two)
    make_hostile(hub_env.server).redirect = redirect
    for command in (["hub", "info", "org/model"], ["hub", "download", "org/model"]):
        code = main(command)
        shown = capsys.readouterr().err
        title, what = cli_explanation(shown)
        assert code == 1 and said in what and hub_env.server.url in what, shown
        assert redirect == "loop" or "file://" in what
        assert "does not recognise" not in title and "internal problem" not in title
    seen("hostile hub", case, f"{title}: {what}")
