"""Fault class "inputs", hostile files: hangs, blow-ups and crashes, and legacy `.bin` files.

Each case runs the real CLI (or the real job functions in a child process) on real files. A hang fails the case
through the child's timeout, not by hanging the run; a blow-up fails it through an address-space limit
(RLIMIT_AS) in the child. The limits are generous: they separate "bounded" from "never ends", not fast from slow.
The children are forked from a warm process that has torch imported (tests/support/warm_cli.py); only the case
that needs a user namespace starts a new program.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from guiapp.checkpoints.samples import llama_config
from guiapp.jobs.runner import JobStatus, run_job
from guiapp.jobs.specs import extract_job, merge_job
from guiapp.merging.recipe import parse_recipe
from guiapp.system.explain import explain
from tests.faults.conftest import SMALL
from tests.faults.harness import cli_explanation, fails_cleanly, leftovers
from tests.support.warm_cli import WarmCli

ADDRESS_SPACE_LIMIT = 1_500_000_000  # torch and a small merge fit; an expanding value or /dev/zero does not
HANG_SECONDS = 150  # a child still running after this is hanging (or quadratic), however loaded the machine


def _cli(warm_cli: WarmCli, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`mergesmith ARGS` in a child with an address-space limit; a hang fails the test by its timeout."""
    return warm_cli.run(args, stdin=stdin, timeout=HANG_SECONDS, address_space=ADDRESS_SPACE_LIMIT)


def _refused(done: subprocess.CompletedProcess) -> tuple[str, str]:
    """The CLI ended with an explanation (exit 1, no traceback); its title and what happened."""
    assert done.returncode == 1, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    # A long first word (a pytest path) makes the CLI wrap right after the label.
    return cli_explanation(done.stderr.replace("What happened:\n  ", "What happened: "))


def _linear(*models: Path, weight: str = "1") -> str:
    return "merge_method: linear\nmodels:\n" + "".join(
        f"  - model: {m}\n    parameters:\n      weight: {weight}\n" for m in models)


# --- only regular files are read ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_named_pipe_in_place_of_a_model_file(name, trio, tmp_path, warm_cli, seen):
    hostile = Path(shutil.copytree(trio.base, tmp_path / "hostile"))
    (hostile / name).unlink()
    os.mkfifo(hostile / name)
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_linear(trio.one, hostile))
    out = tmp_path / "out"
    title, what = _refused(_cli(warm_cli, "merge", str(recipe), str(out)))
    assert "named pipe" in what and name in what
    assert not out.exists() and leftovers(tmp_path) == []
    seen("inputs", f"named pipe as {name} (merge)", f"{title}: {what}")


def test_named_pipe_in_place_of_a_model_file_in_hub_check(trio, tmp_path, warm_cli, seen):
    hostile = Path(shutil.copytree(trio.base, tmp_path / "hostile"))
    (hostile / "model.safetensors").unlink()
    os.mkfifo(hostile / "model.safetensors")
    done = _cli(warm_cli, "hub", "check", str(trio.base), str(hostile))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "named pipe" in done.stdout + done.stderr
    seen("inputs", "named pipe as model.safetensors (hub check)", "named pipe refused")


def test_device_as_the_recipe(tmp_path, warm_cli, seen):
    title, what = _refused(_cli(warm_cli, "merge", "/dev/zero", str(tmp_path / "out")))
    assert title == "The recipe has a problem" and "device" in what
    seen("inputs", "/dev/zero as the recipe", f"{title}: {what}")


def test_weights_file_as_the_recipe(tmp_path, warm_cli, seen):
    weights = tmp_path / "model.safetensors"
    save_file({"big": torch.zeros(1_000_000)}, weights)  # 4 MB: past the recipe limit
    title, what = _refused(_cli(warm_cli, "merge", str(weights), str(tmp_path / "out")))
    assert title == "The recipe has a problem" and "larger than" in what and "safetensors" in what
    seen("inputs", "a weights file passed as the recipe", f"{title}: {what}")


# --- YAML alias expansion ----------------------------------------------------------------------------------

_LAUGHS = "".join(
    f"x{level}: &x{level} [" + ", ".join([f"*x{level - 1}"] * 9 if level else ['"lol"'] * 9) + "]\n"
    for level in range(10)
)  # 9^10 = 3.5 billion strings once expanded


@pytest.mark.parametrize("where", ["weight", "filter"])
def test_billion_laughs_in_a_recipe(where, trio, tmp_path, warm_cli, seen):
    value = "*x9" if where == "weight" else "[{filter: *x9, value: 1}, {value: 1}]"
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_LAUGHS + _linear(trio.one, trio.two, weight=value))
    title, what = _refused(_cli(warm_cli, "merge", str(recipe), str(tmp_path / "out"), "--dry-run"))
    assert title == "The recipe has a problem" and "aliases" in what and len(what) < 400
    seen("inputs", f"billion-laughs YAML as a {where}", f"{title}: {what}")


def test_billion_laughs_value_in_the_window_history(tmp_path, warm_cli, seen):
    # The window's forms hand recipe documents to jobs; a value holding shared lists must not expand on saving.
    script = textwrap.dedent("""
        import sys, time
        from guiapp.jobs.history import JobRecord, save_history, load_history
        value = ["lol"] * 9
        for _ in range(10):
            value = [value] * 9
        record = JobRecord(key="1", title="Merge", kind="merge", spec={"recipe": {"weight": value}},
                           status="queued", created=time.time())
        save_history([record])
        print(len(load_history()))
    """)
    env = {**os.environ, "MERGESMITH_CONFIG_DIR": str(tmp_path / "config")}
    done = warm_cli.run([], code=script, env=env, timeout=HANG_SECONDS, address_space=ADDRESS_SPACE_LIMIT)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr[-2000:]
    assert (tmp_path / "config" / "jobs_history.json").stat().st_size < 1_000_000
    seen("inputs", "job history with a billion-laughs value", "saved, the value left out")


# --- user- and file-supplied regexes ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def adapter(trio, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("adapter") / "adapter"
    result = run_job(extract_job(str(trio.base), str(trio.one), out, rank_value=4))
    assert result.status is JobStatus.DONE, result.error
    return out


# `regex` matches the first one in linear time (it matches nothing); the second runs into the time bound.
@pytest.mark.parametrize(("pattern", "said"), [("(.|.)*!", "left out by the settings"),
                                               ("(.*){1,32000}[bc]", "--include")])
def test_backtracking_include_pattern(pattern, said, trio, tmp_path, warm_cli, seen):
    out = tmp_path / "adapter"
    title, what = _refused(_cli(warm_cli, "extract-lora", "--base", str(trio.base), "--model", str(trio.one),
                                "--out", str(out), "--include", pattern))
    assert said in what
    assert not out.exists() and leftovers(tmp_path) == []
    seen("inputs", f"backtracking --include {pattern}", f"{title}: {what}")


def test_backtracking_rank_pattern_in_an_adapter(trio, adapter, tmp_path, warm_cli, seen):
    hostile = Path(shutil.copytree(adapter, tmp_path / "hostile-adapter"))
    config_path = hostile / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["rank_pattern"] = {"(.*){1,32000}[bc]": 4}
    config_path.write_text(json.dumps(config))
    out = tmp_path / "out"
    title, what = _refused(_cli(warm_cli, "apply-lora", "--base", str(trio.base), "--adapter", str(hostile),
                                "--out", str(out)))
    assert "rank_pattern" in what and "took more than" in what
    assert not out.exists() and leftovers(tmp_path) == []
    seen("inputs", "backtracking rank_pattern in an adapter", f"{title}: {what}")


@pytest.mark.parametrize(("field", "value"), [("r", "abc"), ("r", 0), ("lora_alpha", None),
                                               ("target_modules", 7), ("alpha_pattern", {"q_proj": -1})])
def test_adapter_config_field_that_peft_never_writes(field, value, trio, adapter, tmp_path, warm_cli, seen):
    hostile = Path(shutil.copytree(adapter, tmp_path / "hostile-adapter"))
    config_path = hostile / "adapter_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), field: value}))
    out = tmp_path / "out"
    title, what = _refused(_cli(warm_cli, "apply-lora", "--base", str(trio.base), "--adapter", str(hostile),
                                "--out", str(out)))
    assert field in what and "adapter_config.json" in what
    assert not out.exists() and leftovers(tmp_path) == []
    seen("inputs", f"adapter_config.json with {field}: {value!r}", f"{title}: {what}")


def test_explain_with_a_long_run_of_dotted_words(warm_cli, seen):
    done = _cli(warm_cli, "explain", "-", stdin="a." * 100_000 + "\n")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr
    seen("inputs", "explain with 200 KB of dotted words", done.stdout.strip().splitlines()[0])


# --- planning cost depends on the number of tensors, never on an index's value -----------------------------


def _model_with_tensors(folder: Path, names: list[str]) -> Path:
    folder.mkdir(parents=True)
    save_file({name: torch.zeros(1) for name in names}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(llama_config(SMALL, torch.float32)))
    return folder


PLANNING_CASES = {
    "layer index 999,999,999": ["model.embed_tokens.weight", "model.layers.0.mlp.weight",
                                "model.layers.999999999.mlp.weight"],
    "layer index of 5,000 digits": ["model.embed_tokens.weight", "model.layers.0.mlp.weight",
                                    "model.layers." + "7" * 5000 + ".mlp.weight"],
    "20,000 one-tensor layers": [f"model.layers.{i}.mlp.weight" for i in range(20_000)],
    "20,000 tiny tensors in 4 layers": [f"model.layers.{i % 4}.experts.{i}.weight" for i in range(20_000)],
}


@pytest.mark.long
@pytest.mark.parametrize("case", list(PLANNING_CASES))
def test_planning_cost(case, tmp_path, warm_cli, seen):
    model = _model_with_tensors(tmp_path / "model", PLANNING_CASES[case])
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_linear(model, model))
    done = _cli(warm_cli, "merge", str(recipe), str(tmp_path / "out"), "--dry-run")
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    if done.returncode != 0:
        title, what = cli_explanation(done.stderr)
        assert title != "Mergesmith does not recognise this error", what
    seen("inputs", f"planning: {case}", "planned" if done.returncode == 0 else " ".join(cli_explanation(done.stderr)))


# --- checkpoints and configs from strangers: every value checked where it is read ---------------------------


def _raw_weights(folder: Path, header: dict | bytes, data: bytes) -> None:
    """Replace the folder's model.safetensors by one with exactly this header and data, whatever they say."""
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(body)) + body + data)


def _f32(begin: int, end: int) -> dict:
    return {"dtype": "F32", "shape": [(end - begin) // 4], "data_offsets": [begin, end]}


def _with_tensor(folder: Path, name: str) -> None:
    from safetensors.torch import load_file  # noqa: PLC0415

    tensors = load_file(folder / "model.safetensors")
    save_file({**tensors, name: torch.zeros(2)}, folder / "model.safetensors")


def _with_config(folder: Path, **fields) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))


def _bin_with_number_names(folder: Path) -> None:
    from safetensors.torch import load_file  # noqa: PLC0415

    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save({**state, 1: torch.zeros(2)}, folder / "pytorch_model.bin")


# case: (how the stranger's folder is made from a good model, the words the message must hold)
STRANGER_FILES = {
    "overlapping tensor offsets": (lambda f: _raw_weights(f, {"a": _f32(0, 8), "b": _f32(0, 8)}, b"\0" * 16),
                                   ["model.safetensors", "overlap"]),
    "__metadata__ with a number": (lambda f: _raw_weights(f, {"__metadata__": {"format": 5}, "a": _f32(0, 8)},
                                                          b"\0" * 8), ["model.safetensors", '"__metadata__"']),
    "header nested 100,000 deep": (lambda f: _raw_weights(f, b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}", b""),
                                   ["model.safetensors", "nests"]),
    "layer index 1,000,000,000": (lambda f: _with_tensor(f, "model.layers.1000000000.mlp.weight"),
                                  ["model.safetensors", "1000000000"]),
    "layer index of 5,000 digits": (lambda f: _with_tensor(f, "model.layers." + "7" * 5000 + ".mlp.weight"),
                                    ["model.safetensors", "5,000 digits"]),
    "empty weight_map": (lambda f: (f / "model.safetensors.index.json").write_text('{"weight_map": {}}'),
                         ["model.safetensors.index.json", "lists no tensors"]),
    ".bin with a tensor named 1": (_bin_with_number_names, ["pytorch_model.bin", "tensor names must be text"]),
    "architectures is not a list": (lambda f: _with_config(f, architectures="LlamaForCausalLM"),
                                    ["config.json", '"architectures"']),
    "hidden_size as text": (lambda f: _with_config(f, hidden_size="64"), ["config.json", '"hidden_size"']),
    "num_hidden_layers negative": (lambda f: _with_config(f, num_hidden_layers=-2),
                                   ["config.json", '"num_hidden_layers"']),
    "vocab_size true": (lambda f: _with_config(f, vocab_size=True), ["config.json", '"vocab_size"']),
    "num_attention_heads 10^30": (lambda f: _with_config(f, num_attention_heads=10**30),
                                  ["config.json", '"num_attention_heads"']),
    "torch_dtype a number": (lambda f: _with_config(f, torch_dtype=5), ["config.json", '"torch_dtype"']),
    "tie_word_embeddings text": (lambda f: _with_config(f, tie_word_embeddings="yes"),
                                 ["config.json", '"tie_word_embeddings"']),
    "rope_scaling factor text": (lambda f: _with_config(f, rope_scaling={"rope_type": "linear", "factor": "2"}),
                                 ["config.json", '"rope_scaling.factor"']),
}
# `hub check` reads headers only, so it cannot look inside a pickle; it says the folder has no safetensors.
HUB_CHECK_SAYS = {".bin with a tensor named 1": ["only pickle"]}


def _stranger(trio, tmp_path: Path, case: str) -> Path:
    folder = Path(shutil.copytree(trio.one, tmp_path / "stranger"))
    STRANGER_FILES[case][0](folder)
    return folder


@pytest.mark.parametrize("command", ["merge", "extract-lora", "hub check"])
@pytest.mark.parametrize("case", list(STRANGER_FILES))
def test_files_from_strangers_are_refused_by_name(case, command, trio, tmp_path, warm_cli, seen):
    stranger = _stranger(trio, tmp_path, case)
    out = tmp_path / "out"
    if command == "merge":
        recipe = tmp_path / "recipe.yml"
        recipe.write_text(_linear(trio.two, stranger))
        args = ["merge", str(recipe), str(out)]
    elif command == "extract-lora":
        args = ["extract-lora", "--base", str(trio.base), "--model", str(stranger), "--out", str(out)]
    else:
        args = ["hub", "check", str(trio.base), str(stranger)]
    done = _cli(warm_cli, *args)
    if command == "hub check":
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        shown = " ".join((done.stdout + done.stderr).split())
        assert "cannot be checked" in shown, shown
        for word in HUB_CHECK_SAYS.get(case, STRANGER_FILES[case][1]):
            assert word in shown, shown
        seen("inputs", f"{case} ({command})", shown)
        return
    title, what = _refused(done)
    assert title not in ("Mergesmith stopped on an internal problem", "Mergesmith does not recognise this error"), what
    for word in STRANGER_FILES[case][1]:
        assert word in what, what
    assert not out.exists() and leftovers(tmp_path) == []
    seen("inputs", f"{case} ({command})", f"{title}: {what}")


@pytest.mark.parametrize("case", ["overlapping tensor offsets", "__metadata__ with a number",
                                  "header nested 100,000 deep", "layer index 1,000,000,000"])
def test_hostile_headers_on_the_hub_are_refused_by_hub_info(case, trio, tmp_path, hub_env, capsys, seen):
    from guiapp.__main__ import main  # noqa: PLC0415

    hub_env.server.add_model("org/stranger", _stranger(trio, tmp_path, case))
    code = main(["hub", "info", "org/stranger", "--tensors"])
    shown = capsys.readouterr()
    assert code == 1 and "Traceback" not in shown.err, shown.err
    title, what = cli_explanation(shown.out + shown.err)
    assert title == "A model file cannot be read", what
    for word in ["org/stranger/", *STRANGER_FILES[case][1]]:
        assert word in what, what
    seen("inputs", f"{case} (hub info)", f"{title}: {what}")


# --- files that change while they are read ----------------------------------------------------------------


def test_input_truncated_while_the_merge_reads_it(trio, tmp_path, warm_cli, seen):
    victim = Path(shutil.copytree(trio.one, tmp_path / "victim"))
    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from guiapp.merging.recipe import parse_recipe
        from guiapp.jobs.runner import JobListeners, run_job
        from guiapp.jobs.specs import merge_job
        from guiapp.system.explain import explain
        weights = Path({str(victim / "model.safetensors")!r})

        def truncate(job, event):  # another program cuts the file once the merge has read from it
            if event.stage == "Merging" and event.done == 1:
                os.truncate(weights, 4096)

        recipe = parse_recipe({_linear(trio.two, victim)!r})
        result = run_job(merge_job(recipe, Path({str(out)!r})), JobListeners(on_event=truncate))
        explanation = explain(result.error)
        print(result.status.name)
        print(explanation.title)
        print(explanation.what)
    """)
    done = warm_cli.run([], code=script, timeout=HANG_SECONDS)
    assert done.returncode == 0, f"the merge died (exit {done.returncode}): {done.stderr[-2000:]}"
    status, title, what = done.stdout.splitlines()[:3]
    assert status == "FAILED" and title == "A model file cannot be read" and "model.safetensors" in what
    assert not out.exists() and leftovers(tmp_path) == []
    seen("inputs", "input truncated while the merge reads it", f"{title}: {what}")


# --- .bin inputs -----------------------------------------------------------------------------------------


def _bin_model(folder: Path, state: dict, *, legacy: bool = False) -> Path:
    folder.mkdir(parents=True)
    torch.save(state, folder / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy)
    (folder / "config.json").write_text(json.dumps(llama_config(SMALL, torch.float32)))
    return folder


def _state(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"model.embed_tokens.weight": torch.randn(8, 4, generator=generator),
            "model.layers.0.mlp.weight": torch.randn(4, 4, generator=generator)}


def test_tensor_named_metadata_in_a_bin_input(tmp_path, seen):
    one = _bin_model(tmp_path / "one", {**_state(1), "__metadata__": torch.zeros(2)})
    two = _bin_model(tmp_path / "two", {**_state(2), "__metadata__": torch.zeros(2)})
    _, explanation = fails_cleanly(merge_job(parse_recipe(_linear(one, two)), tmp_path / "out"),
                                   inputs=[one, two], out=tmp_path / "out")
    assert "__metadata__" in explanation.what
    seen("inputs", "a tensor named __metadata__ in .bin inputs", explanation)


def test_legacy_bin_checkpoints_merge(tmp_path, seen):
    one = _bin_model(tmp_path / "one", _state(1), legacy=True)
    two = _bin_model(tmp_path / "two", _state(2), legacy=True)
    out = tmp_path / "out"
    result = run_job(merge_job(parse_recipe(_linear(one, two)), out))
    assert result.status is JobStatus.DONE, explain(result.error).render_text()
    from safetensors.torch import load_file  # noqa: PLC0415

    merged = load_file(out / "model.safetensors")
    expected = _state(1)["model.layers.0.mlp.weight"] + _state(2)["model.layers.0.mlp.weight"]
    torch.testing.assert_close(merged["model.layers.0.mlp.weight"], expected / 2)
    seen("inputs", "legacy (pre-1.6, non-zip) .bin inputs", "merged")


class _RunsCode:
    """A pickle payload that would create a marker file if it were ever unpickled."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_legacy_bin_holding_code_is_refused(tmp_path, seen):
    marker = tmp_path / "code-ran"
    hostile = _bin_model(tmp_path / "hostile", {**_state(1), "payload": _RunsCode(marker)}, legacy=True)
    two = _bin_model(tmp_path / "two", _state(2), legacy=True)
    _, explanation = fails_cleanly(merge_job(parse_recipe(_linear(hostile, two)), tmp_path / "out"),
                                   inputs=[hostile, two], out=tmp_path / "out")
    assert not marker.exists(), "code from the pickle ran"
    assert explanation.title == "A model file contains code" and "run code" in explanation.what
    assert "safetensors" in explanation.fix
    seen("inputs", "legacy .bin holding code", explanation)


# --- the environment ---------------------------------------------------------------------------------------


def _stranger_without_home() -> list[str] | None:
    """A command prefix that runs a child as a user with no passwd entry (a user namespace), or None if unavailable."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--user", "--map-user=54321", "true"]).returncode != 0:
        return None
    return [unshare, "--user", "--map-user=54321"]


def test_home_unset_and_no_passwd_entry(tmp_path, seen):
    stranger = _stranger_without_home()
    if stranger is None:
        pytest.skip("user namespaces (unshare --user) are not available here")
    recipe = tmp_path / "recipe.yml"
    recipe.write_text("merge_method: nonsense\nmodels: []\n")
    env = {key: value for key, value in os.environ.items()
           if key not in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "MERGESMITH_CONFIG_DIR", "MERGESMITH_CACHE_DIR")}
    env["TMPDIR"] = str(tmp_path)  # the stand-in home goes where the test can see it
    # A new program (not a warm child, tests/support/warm_cli.py): only one started inside the user namespace runs
    # as a user with no passwd entry.
    done = subprocess.run([*stranger, sys.executable, "-m", "guiapp", "merge", str(recipe), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=HANG_SECONDS, env=env)
    title, what = _refused(done)
    assert title == "The recipe has a problem"
    seen("inputs", "HOME unset, no passwd entry", f"{title}: {what}")
