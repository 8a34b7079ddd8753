"""`try` and `perplexity` on hostile models and inputs: code that comes with a model, templates and prompts that
never end, tokenizers that crash, files that are not files, generation modes the streaming Try cannot run.

The models are the tiny causal LM of tests/tryout/models.py with one file made hostile here. The CLI cases run in
forked children (tests/support/warm_cli.py) with a timeout, so a hang fails the case instead of the run.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guiapp.jobs.runner import Job, JobStatus, run_job
from guiapp.system.explain import explain
from tests.faults.harness import cli_explanation
from tests.tryout.models import SENTENCES

HANG_SECONDS = 150  # a child still running after this hangs, however loaded the machine


def _variant(model: Path, tmp_path: Path, name: str = "hostile") -> Path:
    return Path(shutil.copytree(model, tmp_path / name))


def _edit_json(path: Path, **changes) -> None:
    document = json.loads(path.read_text())
    document.update(changes)
    path.write_text(json.dumps(document))


def _refused(done: subprocess.CompletedProcess) -> str:
    """The CLI ended with an explanation (exit 1, no traceback); its headline and what happened, on one line."""
    assert done.returncode == 1, f"exit {done.returncode}: {done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    title, what = cli_explanation(done.stderr.replace("What happened:\n  ", "What happened: "))
    return f"{title}: {what}"


def _text_file(tmp_path: Path) -> Path:
    text = tmp_path / "text.txt"
    text.write_text(" ".join(SENTENCES))
    return text


# --- code that comes with a model never runs, whatever the user answers ----------------------------------------

MARKING_CODE = "from pathlib import Path\nPath({marker!r}).write_text('the model code ran')\n"


def _model_with_code(model: Path, tmp_path: Path, where: str, marker: Path) -> Path:
    folder = _variant(model, tmp_path)
    code = MARKING_CODE.format(marker=str(marker))
    if where == "config.json":
        (folder / "configuration_evil.py").write_text(code + "from transformers import LlamaConfig as EvilConfig\n")
        (folder / "modeling_evil.py").write_text(code + "from transformers import LlamaForCausalLM as EvilModel\n")
        _edit_json(folder / "config.json", auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                                                      "AutoModelForCausalLM": "modeling_evil.EvilModel"})
    elif where == "tokenizer_config.json":
        (folder / "tokenization_evil.py").write_text(
            code + "from transformers import PreTrainedTokenizerFast as EvilTokenizer\n")
        _edit_json(folder / "tokenizer_config.json",
                   auto_map={"AutoTokenizer": [None, "tokenization_evil.EvilTokenizer"]})
    else:
        (folder / "modeling_extra.py").write_text(code)
    return folder


@pytest.mark.long
@pytest.mark.parametrize("command", ["try", "perplexity"])
@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json", "a .py file"])
def test_code_that_comes_with_a_model_never_runs_even_when_the_user_says_yes(command, where, causal_fp32,
                                                                            probe_in_cache, warm_cli, tmp_path):
    marker = tmp_path / "code-ran"
    folder = _model_with_code(causal_fp32, tmp_path, where, marker)
    extra = ["--prompt", "the cat", "--max-new-tokens", "2"] if command == "try" else \
        ["--text", str(_text_file(tmp_path))]
    done = warm_cli.run([command, str(folder), *extra], stdin="y\n" * 5, timeout=HANG_SECONDS)
    said = _refused(done)
    assert not marker.exists(), "the model's code ran"
    assert "Do you wish to run the custom code" not in done.stdout + done.stderr
    assert "never runs code" in said, said
    assert (where if where != "a .py file" else "modeling_extra.py") in said, said


# --- tokenizers that crash or are not files -------------------------------------------------------------------

BACKTRACKING = {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated", "invert": False}


def _backtracking_tokenizer(model: Path, tmp_path: Path) -> Path:
    folder = _variant(model, tmp_path)
    _edit_json(folder / "tokenizer.json", pre_tokenizer=BACKTRACKING)
    return folder


@pytest.mark.long
def test_a_tokenizer_that_panics_is_named_not_a_traceback(causal_fp32, probe_in_cache, warm_cli, tmp_path):
    folder = _backtracking_tokenizer(causal_fp32, tmp_path)
    done = warm_cli.run(["try", str(folder), "--prompt", "a" * 3000 + "!", "--max-new-tokens", "2"],
                        timeout=HANG_SECONDS)
    said = _refused(done)
    assert "tokenizer.json" in said and "cannot be used" in said and "retry-limit" in said, said


def test_a_tokenizer_that_cannot_be_built_is_named(causal_fp32, probe_in_cache, tmp_path):
    folder = _variant(causal_fp32, tmp_path)
    _edit_json(folder / "tokenizer.json", pre_tokenizer={**BACKTRACKING, "pattern": {"Regex": "(unclosed"}})
    result = _try_in_process(folder)
    assert result.status is JobStatus.FAILED
    explanation = explain(result.error)
    assert explanation.recognised and "tokenizer.json" in explanation.what and "cannot be used" in explanation.what \
        and "loading it failed" in explanation.what, explanation.render_text()


def test_a_native_panic_in_a_job_fails_the_job_and_is_explained(causal_fp32, tmp_path):
    """A Rust panic is a BaseException: the job boundary catches it, and the explanation names it."""
    from tokenizers import Tokenizer

    folder = _backtracking_tokenizer(causal_fp32, tmp_path)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    result = run_job(Job("panics", "try", {}, lambda progress: tokenizer.encode("a" * 3000 + "!")))
    assert result.status is JobStatus.FAILED and type(result.error).__name__ == "PanicException"
    explanation = explain(result.error)
    assert explanation.recognised and "stopped on an internal error" in explanation.what, explanation.render_text()


def test_the_window_runner_survives_a_native_panic_and_runs_the_next_job(causal_fp32, tmp_path):
    """The window's worker thread would die of a panic, and every job after it would wait forever."""
    import threading

    from tokenizers import Tokenizer

    from guiapp.jobs.runner import JobListeners, JobRunner

    tokenizer = Tokenizer.from_file(str(_backtracking_tokenizer(causal_fp32, tmp_path) / "tokenizer.json"))
    results, finished = [], threading.Event()

    def done(result) -> None:
        results.append(result)
        if len(results) == 2:
            finished.set()

    runner = JobRunner()
    try:
        runner.submit(Job("panics", "try", {}, lambda progress: tokenizer.encode("a" * 3000 + "!")),
                      JobListeners(on_done=done))
        runner.submit(Job("works", "try", {}, lambda progress: {"fine": True}), JobListeners(on_done=done))
        assert finished.wait(60), f"the runner stopped after {len(results)} job(s)"
    finally:
        runner.shutdown(timeout=10)
    assert [result.status for result in results] == [JobStatus.FAILED, JobStatus.DONE]


def test_keyboard_interrupt_still_ends_a_job():
    def interrupted(progress):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_job(Job("interrupted", "try", {}, interrupted))


@pytest.mark.long
@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
def test_a_tokenizer_file_that_is_not_a_regular_file_is_refused(kind, causal_fp32, probe_in_cache, warm_cli, tmp_path):
    folder = _variant(causal_fp32, tmp_path)
    (folder / "tokenizer.json").unlink()
    if kind == "fifo":
        os.mkfifo(folder / "tokenizer.json")
    else:
        (folder / "tokenizer.json").symlink_to("/dev/zero")
    done = warm_cli.run(["try", str(folder), "--prompt", "the cat", "--max-new-tokens", "2"], timeout=HANG_SECONDS,
                        address_space=3_000_000_000)
    said = _refused(done)
    assert "tokenizer.json" in said and "not a regular file" in said, said


# --- chat templates: bounded, sandboxed, their own words ------------------------------------------------------


# A template whose loops would run for hours: it is stopped or cancelled long before.
ENDLESS_TEMPLATE = ("{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}"
                    "{% endfor %}{% endfor %}{% endfor %}")


def _with_template(model: Path, tmp_path: Path, template: str) -> Path:
    folder = _variant(model, tmp_path)
    (folder / "chat_template.jinja").write_text(template)  # where transformers saves a tokenizer's template
    return folder


def _loaded_with_template(model: Path, tmp_path: Path, template: str):
    """`model` with `template` as its chat template, loaded in float32 on the CPU."""
    import torch

    from guiapp.inference.running import load_model, resolve_sources

    return load_model(resolve_sources([str(_with_template(model, tmp_path, template))])[0], torch.float32, "cpu")


def _try_in_process(folder: Path, prompt: str = "the cat", **options):
    from guiapp.jobs.tryout import try_job

    return run_job(try_job([str(folder)], prompt, max_new_tokens=options.pop("max_new_tokens", 3), **options))


@pytest.mark.parametrize(("template", "said"), [
    ("{{ raise_exception('Conversation roles must alternate user/assistant') }}",
     "Conversation roles must alternate user/assistant"),
    ("{{ ''.__class__.__mro__ }}", "tries to reach Python internals"),
    ("{{ 'x' * 5000000000 }}", "too large"),
    ("{% for m in messages %}{{ m.content }}{% endfor %", "is not a valid template"),
])
def test_a_chat_template_that_fails_says_why(template, said, causal_fp32, probe_in_cache, tmp_path):
    result = _try_in_process(_with_template(causal_fp32, tmp_path, template))
    assert result.status is JobStatus.FAILED
    explanation = explain(result.error)
    assert explanation.recognised and said in explanation.what and "chat template" in explanation.what, \
        explanation.render_text()


def test_a_chat_template_that_never_ends_is_stopped(causal_fp32, probe_in_cache, tmp_path):
    from guiapp.errors import CheckpointError
    from guiapp.inference.running import render_chat_template
    from guiapp.progress import Progress

    loaded = _loaded_with_template(causal_fp32, tmp_path, ENDLESS_TEMPLATE)
    started = time.monotonic()
    # The endless render keeps a core busy until it is stopped: the shortest limit that still reads as a limit.
    with pytest.raises(CheckpointError, match=r"took longer than 1\.5 seconds") as caught:
        render_chat_template(loaded, "the cat", Progress(), seconds=1.5)
    assert time.monotonic() - started < 30
    assert "chat template" in caught.value.message


def test_a_chat_template_renders_as_transformers_renders_it(causal_fp32, probe_in_cache):
    import torch

    from guiapp.inference.running import load_model, render_chat_template, resolve_sources
    from guiapp.progress import Progress

    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    expected = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "the cat"}], tokenize=False,
                                                    add_generation_prompt=True)
    assert render_chat_template(loaded, "the cat", Progress()) == expected


def _template_children_started(monkeypatch) -> list:
    """The template children started from now on (each `subprocess.Popen` of the template child, counted), none
    kept from an earlier test."""
    from guiapp.inference.template_process import end_idle

    end_idle()
    started, popen = [], subprocess.Popen

    def counted(command, *args, **options):
        child = popen(command, *args, **options)
        if "guiapp.merging.template_child" in command:
            started.append(child)
        return child

    monkeypatch.setattr(subprocess, "Popen", counted)
    return started


@pytest.mark.long
def test_one_template_child_serves_render_after_render_and_a_stopped_one_is_replaced(causal_fp32, probe_in_cache,
                                                                                      tmp_path, monkeypatch):
    """Starting the child (transformers' renderer) costs ~0.7 s of CPU a render: one that rendered a text in time
    is kept for the next render; one that answered with a problem or ran too long is ended, and so is one that
    ended while idle: the next render starts a new one."""
    import torch

    from guiapp.errors import CheckpointError
    from guiapp.inference.running import load_model, render_chat_template, resolve_sources
    from guiapp.progress import Progress

    started = _template_children_started(monkeypatch)
    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    expected = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "the cat"}], tokenize=False,
                                                    add_generation_prompt=True)
    assert [render_chat_template(loaded, "the cat", Progress()) for _ in range(3)] == [expected] * 3
    assert len(started) == 1 and started[0].poll() is None
    raising = _loaded_with_template(causal_fp32, tmp_path / "raising", "{{ raise_exception('only system messages') }}")
    with pytest.raises(CheckpointError, match="only system messages"):
        render_chat_template(raising, "the cat", Progress())
    assert started[0].wait(timeout=10) is not None  # a problem ends the child
    endless = _loaded_with_template(causal_fp32, tmp_path / "endless", ENDLESS_TEMPLATE)
    with pytest.raises(CheckpointError, match=r"took longer than 1\.5 seconds"):
        render_chat_template(endless, "the cat", Progress(), seconds=1.5)
    assert len(started) == 2 and started[1].wait(timeout=10) is not None  # killed, not kept
    assert render_chat_template(loaded, "the cat", Progress()) == expected
    assert len(started) == 3
    started[2].kill()  # the kept child ends while idle (the system ended it): the next render is not blamed
    started[2].wait()
    assert render_chat_template(loaded, "the cat", Progress()) == expected
    assert len(started) == 4


def test_a_cancel_while_a_template_renders_ends_its_child(causal_fp32, probe_in_cache, tmp_path, monkeypatch):
    import threading

    import torch

    from guiapp.errors import JobCancelled
    from guiapp.inference.running import load_model, render_chat_template, resolve_sources
    from guiapp.progress import CancelToken, Progress

    started = _template_children_started(monkeypatch)
    plain = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    render_chat_template(plain, "the cat", Progress())  # a kept child, ready: the cancel lands in the render
    endless = _loaded_with_template(causal_fp32, tmp_path, ENDLESS_TEMPLATE)
    token = CancelToken()
    timer = threading.Timer(0.5, token.cancel)
    timer.start()
    try:
        with pytest.raises(JobCancelled):
            render_chat_template(endless, "the cat", Progress(cancel=token), seconds=60)
    finally:
        timer.cancel()
    assert len(started) == 1 and started[0].poll() is not None


# --- prompts and generation settings ---------------------------------------------------------------------------


def test_a_prompt_longer_than_the_context_is_cut_with_a_warning_or_refused(causal_fp32, probe_in_cache, tmp_path):
    long_prompt = "the cat sat on the mat " * 6000  # 138 KB, 36,000 tokens for a model that reads 512
    result = _try_in_process(causal_fp32, long_prompt)
    assert result.status is JobStatus.DONE, result.traceback
    assert any("reads at most 512 tokens" in line and "last" in line for line in result.log), result.log
    refused = _try_in_process(causal_fp32, long_prompt, long_prompt="refuse")
    assert refused.status is JobStatus.FAILED
    explanation = explain(refused.error)
    assert "reads at most 512 tokens" in explanation.what and refused.error.key == ("prompt",), \
        explanation.render_text()


@pytest.mark.parametrize(("settings", "said"), [
    ({"num_beams": 4}, "beam search"),
    ({"dola_layers": "high"}, "DoLa"),
    ({"penalty_alpha": 0.6, "top_k": 4}, "contrastive search"),
])
def test_a_generation_mode_try_cannot_stream_is_overridden_and_said(settings, said, causal_fp32, probe_in_cache,
                                                                   tmp_path):
    folder = _variant(causal_fp32, tmp_path)
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, **settings}))
    result = _try_in_process(folder)
    assert result.status is JobStatus.DONE, explain(result.error).render_text() if result.error else ""
    notes = [line for line in result.log if said in line]
    assert len(notes) == 1 and "generation_config.json" in notes[0], result.log
    assert result.summary["generations"][0]["tokens"]


def test_a_generation_mode_moved_to_the_hub_is_not_called_model_code():
    pasted = ("ValueError: Dola Generation requires `trust_remote_code=True` in your `generate` call, since it loads "
              "https://hf.co/transformers-community/dola.")
    explanation = explain(pasted)
    assert explanation.kind == "generation_mode_on_the_hub", explanation.render_text()
    assert "Dola Generation" in explanation.what and "ships Python code" not in explanation.what


def test_a_prompt_with_bytes_that_are_not_utf8_is_decoded_with_replacement_and_said(causal_fp32, probe_in_cache):
    result = _try_in_process(causal_fp32, "the cat \udcff sat")  # how Python hands over a bad byte in argv
    assert result.status is JobStatus.DONE, result.traceback
    assert any("not UTF-8" in line and "replaced" in line for line in result.log), result.log


def test_a_text_file_with_bytes_that_are_not_utf8_is_named_with_the_position(causal_fp32, probe_in_cache, tmp_path,
                                                                            capsys):
    from guiapp.__main__ import main
    from guiapp.cli.process import EXIT_FAILED

    text = tmp_path / "text.txt"
    text.write_bytes(b"the cat sat\n on the \xff mat")
    assert main(["perplexity", str(causal_fp32), "--text", str(text)]) == EXIT_FAILED
    err = " ".join(capsys.readouterr().err.split())
    assert "text.txt" in err and "byte 20" in err and "0xff" in err and "Traceback" not in err, err


# --- Ctrl-C --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_stops_a_long_try_within_seconds(causal_fp32, probe_in_cache, tmp_path):
    folder = _variant(causal_fp32, tmp_path)
    _edit_json(folder / "config.json", max_position_embeddings=4096)
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    process = subprocess.Popen(
        # 115 KB, 30,000 tokens: about as long as one command-line argument can be
        [sys.executable, "-m", "guiapp", "try", str(folder), "--prompt", "the cat sat on the mat " * 5000,
         "--max-new-tokens", "4000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a background pytest ignores SIGINT
    try:
        # Interrupted once the model writes (the old Try sat in the prompt's forward pass, and never did).
        written = select.select([process.stdout], [], [], HANG_SECONDS)[0] and os.read(process.stdout.fileno(), 64)
        assert written, "no text came out"
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        stderr = b""
        while b"Interrupted" not in stderr and select.select([process.stderr], [], [], 30)[0]:
            if not (chunk := os.read(process.stderr.fileno(), 65536)):
                break
            stderr += chunk
        answered = time.monotonic() - interrupted
        process.wait(timeout=60)
        ended = time.monotonic() - interrupted
    finally:
        process.kill()
    stderr = (stderr + process.stderr.read()).decode()
    assert "Interrupted. Nothing was left behind." in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert answered < 3, f"took {answered:.1f} s to answer"
    # Then the interpreter unloads torch and transformers: under a second on an idle machine, more on a busy one.
    assert ended < 10, f"took {ended:.1f} s to end"
