"""The `mergesmith` entry point itself: version, usage errors, and a window that cannot open."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from guiapp.checkpoints.samples import LlamaShape, write_byte_tokenizer, write_llama, write_llama_finetune
from guiapp.system.probe import ProbeResult, cache_file, machine_fingerprint, store
from tests.support import warm_cli
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - the test Hub for the pipe tests

TINY = LlamaShape(hidden=16, intermediate=32, layers=1, heads=2, kv_heads=1, vocab=32)


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m guiapp ARGS` in a process of its own, forked from the warm CLI (torch already imported)."""
    return warm_cli.shared().run(args, timeout=300, env=env)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny base model and a fine-tune of it."""
    folder = tmp_path_factory.mktemp("pair")
    base = write_llama(folder / "base", TINY, seed=0)
    return base, write_llama_finetune(folder / "tune", base, seed=1, delta_rank=None)


@pytest.fixture
def cli_env(tmp_path, probed: ProbeResult) -> dict[str, str]:
    """The environment for a CLI run whose error report goes to a temporary folder, where `try` and `perplexity`
    find the run's probe as on a second start."""
    store(probed, tmp_path / "cache" / cache_file(machine_fingerprint()).name)
    return {**os.environ, "MERGESMITH_CACHE_DIR": str(tmp_path / "cache")}


def test_version_and_usage():
    version = _run("--version")
    assert version.returncode == 0 and version.stdout.startswith("mergesmith ")
    assert _run("no-such-command").returncode == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the display check is Linux's")
def test_without_a_display_the_window_explains_instead_of_crashing():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    result = _run(env=env)
    assert result.returncode == 1
    assert "needs a desktop session" in result.stderr and "mergesmith --help" in result.stderr


def _screen_rows(text: str, columns: int) -> int:
    """How many rows a terminal `columns` wide advances while showing `text`: a newline, or a character written
    past the last column (the terminal wraps it onto a new row)."""
    rows, column = 0, 0
    for character in text:
        if character == "\r":
            column = 0
        elif character == "\n":
            rows, column = rows + 1, 0
        else:
            if column == columns:
                rows, column = rows + 1, 0
            column += 1
    return rows


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses a Linux pseudo-terminal")
def test_progress_fits_an_80_column_terminal(tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with subprocess.Popen([sys.executable, "-m", "guiapp", "demo", "--out", str(tmp_path)],
                          stdin=follower, stdout=follower, stderr=follower) as process:
        os.close(follower)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        assert process.wait(timeout=300) == 0
    os.close(leader)
    text = output.decode()
    merging = text[text.index("\rMerging"):text.index("Done:")]
    assert "21/21" in merging
    # 22 redraws (0/21 … 21/21) on one row, closed by one newline before the summary.
    assert _screen_rows(merging, 80) == 1, merging
    assert all(len(redraw) < 80 for redraw in merging.strip().split("\r"))


def _run_into_a_closed_pipe(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with stdout a pipe whose reading end is already closed (`… | head` once head has exited)."""
    reading, writing = os.pipe()
    os.close(reading)
    with subprocess.Popen([sys.executable, "-m", "guiapp", *args], stdout=writing, stderr=subprocess.PIPE,
                          env=env) as process:
        os.close(writing)
        stderr = process.stderr.read().decode()
        return process.wait(timeout=120), stderr


def test_a_closed_pipe_ends_quietly(hub_env, tmp_path):
    model = write_llama(tmp_path / "model", TINY, seed=0)
    for index in range(30):
        hub_env.server.add_model(f"org/model-{index}", model)
    env = {**hub_env.env, "MERGESMITH_CACHE_DIR": str(tmp_path / "cache")}
    for command in (("hub", "search", "--json", "--limit", "30"),
                    ("explain", "RuntimeError: \"svd_cuda_gesvdj\" not implemented for 'BFloat16'")):
        code, stderr = _run_into_a_closed_pipe(*command, env=env)
        assert (code, stderr) == (0, ""), command
    assert not (tmp_path / "cache" / "last-error.txt").exists()


def test_an_unreachable_hub_is_named_by_its_address(tmp_path):
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = {**os.environ, "HF_ENDPOINT": endpoint, "MERGESMITH_CACHE_DIR": str(tmp_path / "cache")}
    result = _run("hub", "info", "org/model", env=env)
    assert result.returncode == 1
    assert endpoint in result.stderr and "huggingface.co" not in result.stderr


def test_retry_settings_are_printed_as_the_commands_flags(tiny_pair, tmp_path, cli_env):
    base, tune = tiny_pair
    (tmp_path / "adapter").mkdir()  # an empty folder: replaced only when asked to
    result = _run("extract-lora", "--base", str(base), "--model", str(tune), "--out", str(tmp_path / "adapter"),
                  env=cli_env)
    assert result.returncode == 1
    # The first suggestion is a new name; replacing the folder stays an explicit choice (--overwrite, in the hint).
    assert f"Retry with: --out {tmp_path / 'adapter-2'}\n" in result.stderr and "output=" not in result.stderr
    # A pasted error has no command of ours to retry: its settings are not printed as if it had.
    pasted = _run("explain", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", env=cli_env)
    assert pasted.returncode == 0 and "Run it on the CPU" in pasted.stdout and "Retry with" not in pasted.stdout


def test_extracting_from_the_same_model_twice_says_why(tiny_pair, tmp_path, cli_env):
    base, _ = tiny_pair
    result = _run("extract-lora", "--base", str(base), "--model", str(base), "--out", str(tmp_path / "adapter"),
                  env=cli_env)
    assert result.returncode == 1 and "identical" in result.stderr
    why = next(line for line in result.stderr.splitlines() if line.startswith("Why:"))
    assert "difference" in why and "shapes" not in why


def test_an_adapter_given_as_a_model_is_named_as_one(tiny_pair, tmp_path, cli_env):
    import json

    import torch
    from safetensors.torch import save_file

    base, tune = tiny_pair
    adapter = tmp_path / "my-adapter"
    adapter.mkdir()
    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(2, TINY.hidden),
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.zeros(TINY.hidden, 2)},
              adapter / "adapter_model.safetensors")
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 2,
                                                             "target_modules": ["q_proj"]}))
    result = _run("extract-lora", "--base", str(base), "--model", str(adapter), "--out", str(tmp_path / "out"),
                  env=cli_env)
    assert result.returncode == 1
    assert "adapter" in result.stderr and "apply-lora" in result.stderr
    assert "no .safetensors" not in result.stderr
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(f"merge_method: linear\nmodels:\n  - model: {tune}\n    parameters: {{weight: 0.5}}\n"
                      f"  - model: {adapter}\n    parameters: {{weight: 0.5}}\ndtype: float32\n")
    merged = _run("merge", str(recipe), str(tmp_path / "merged"), env=cli_env)
    assert merged.returncode == 1 and "adapter" in merged.stderr
    assert f"+{adapter}" in merged.stderr.replace("\n  ", " ")  # the recipe's base+adapter syntax


def test_help_says_what_each_command_and_option_does():
    merge = _run("merge", "--help")
    merge_text = " ".join(merge.stdout.split())  # as argparse wrapped it for the terminal's width
    assert merge.returncode == 0 and "docs/recipes.md" in merge_text and "Help › Recipe format" in merge_text
    demo = _run("demo", "--help")
    assert "sample models" in demo.stdout.split("options:")[0]  # a description, not only the usage line
    search = _run("hub", "search", "--help").stdout
    options = search[search.index("options:"):]
    sort_help = " ".join(options[options.index("--sort"):options.index("--limit")].split())
    assert "most downloaded" in sort_help and "trending" in sort_help


def test_an_applied_model_card_is_titled_with_the_destination(tiny_pair, tmp_path, cli_env):
    base, tune = tiny_pair
    adapter, full = tmp_path / "adapter", tmp_path / "math-rebuilt"
    extracted = _run("extract-lora", "--base", str(base), "--model", str(tune), "--out", str(adapter), "--rank", "4",
                     env=cli_env)
    assert extracted.returncode == 0, extracted.stderr
    applied = _run("apply-lora", "--base", str(base), "--adapter", str(adapter), "--out", str(full), env=cli_env)
    assert applied.returncode == 0, applied.stderr
    card = (full / "README.md").read_text()
    assert "\n# math-rebuilt\n" in card and "mergesmith-partial" not in card


def test_a_job_finishes_when_its_progress_has_nowhere_to_go(tmp_path, cli_env):
    # `mergesmith demo 2>&1 | head -1`: the reader is gone before the merge starts; the merge still completes.
    reading, writing = os.pipe()
    os.close(reading)
    with subprocess.Popen([sys.executable, "-m", "guiapp", "demo", "--out", str(tmp_path)], stdout=writing,
                          stderr=writing, env=cli_env) as process:
        os.close(writing)
        assert process.wait(timeout=300) == 0
    assert (tmp_path / "merged" / "model.safetensors").is_file()
    assert not (tmp_path / "cache" / "last-error.txt").exists()


@pytest.fixture(scope="module")
def demo_models(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The sample models and their merge, written by `mergesmith demo` as a newcomer runs it (output to pipes)."""
    folder = tmp_path_factory.mktemp("demo")
    run = _run("demo", "--out", str(folder))
    assert run.returncode == 0, run.stderr
    return folder, run


def test_demo_progress_says_what_its_percentage_counts(demo_models):
    _, run = demo_models
    lines = [line for line in run.stderr.splitlines() if "%" in line]
    assert lines
    for line in lines:
        found = re.search(r"(\d+)(?:/| of )(\d+)\D*?(\d+) ?%", line)
        done, total, percent = (int(found.group(i)) for i in (1, 2, 3))
        # A percentage that is not the count's must say what it measures.
        assert percent == round(100 * done / total) or "of the bytes" in line, line


@pytest.mark.long
def test_sample_models_say_they_are_untrained_where_their_output_appears(demo_models, tmp_path, cli_env):
    folder, _ = demo_models
    merged, base = folder / "merged", write_llama(tmp_path / "other", TINY, seed=0)
    write_byte_tokenizer(base, vocab=TINY.vocab)
    tried = _run("try", str(merged), "--prompt", "Hello", "--max-new-tokens", "4", env=cli_env)
    assert tried.returncode == 0, tried.stderr
    assert "untrained" in tried.stdout and "random" in tried.stdout  # a merge of sample models is one too
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. It was a sunny day.\n")
    scored = _run("perplexity", str(merged), str(base), "--text", str(text), env=cli_env)
    assert scored.returncode == 0, scored.stderr
    sample_line, other_line = scored.stdout.strip().splitlines()[-2:]
    assert "untrained" in sample_line and "vocabulary" in sample_line
    assert "untrained" not in other_line  # a model that is not a sample gets no such note
    for model in (merged, base):  # each model's loading is said once (its stage names it by its short name)
        assert sum(line.startswith(f"Loading {model.name},") for line in scored.stderr.splitlines()) == 1, \
            scored.stderr


def test_try_and_perplexity_help_say_what_they_do():
    for command, words in (("try", "generate"), ("perplexity", "perplexity")):
        described = _run(command, "--help").stdout.split("positional arguments:")[0]
        assert words in described.split("MODEL [MODEL ...]")[-1].lower(), described


def test_an_existing_output_names_the_flag_that_replaces_it(demo_models, cli_env):
    folder, _ = demo_models
    again = _run("merge", str(folder / "merged" / "mergesmith_recipe.yml"), str(folder / "merged"), env=cli_env)
    assert again.returncode != 0
    assert "--overwrite" in again.stdout + again.stderr


def test_the_readme_command_line_examples_read_as_commands():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## The command line"):]
    block = section[section.index("```bash") + len("```bash"):section.index("```", section.index("```bash") + 7)]
    assert ".venv/bin/mergesmith" in section[:section.index("```bash")]  # where `mergesmith` comes from
    for line in block.strip().splitlines():
        command = line.split("  #")[0]
        assert "|" not in command.replace("\\|", ""), line  # one command per line, no pipeline look-alike
        assert command.startswith("mergesmith ")


@pytest.mark.long
def test_trying_a_model_with_an_adapter_prints_no_library_warnings(demo_models, tmp_path, cli_env):
    folder, _ = demo_models
    adapter = tmp_path / "adapter"
    extracted = _run("extract-lora", "--base", str(folder / "tiny-base"), "--model", str(folder / "tiny-math"),
                     "--out", str(adapter), "--rank", "4", env=cli_env)
    assert extracted.returncode == 0, extracted.stderr
    tried = _run("try", f"{folder / 'tiny-base'}+{adapter}", "--prompt", "Hello", "--max-new-tokens", "2", env=cli_env)
    assert tried.returncode == 0, tried.stderr
    assert "Warning" not in tried.stderr and "warnings.warn" not in tried.stderr, tried.stderr
