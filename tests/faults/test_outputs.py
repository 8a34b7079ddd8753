"""Fault class "outputs": an output never is, holds or sits inside an input, replaces only an earlier Mergesmith
output, never replaces a folder that appeared while the job ran, and leaves nothing behind.

Every case runs the real CLI (`guiapp.__main__.main`, or `python -m guiapp` where a signal is involved) or the real job
functions on real files, and checks that every input file's SHA-256 is unchanged.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from huggingface_hub import constants

from guiapp.__main__ import main
from guiapp.checkpoints.output_guard import clean_leftovers
from guiapp.checkpoints.writing import StagedOutput
from guiapp.cli.process import PAUSE_VARIABLE
from guiapp.errors import OutputError
from guiapp.jobs.fixes import REPLACE, RETRY_WITH
from guiapp.jobs.runner import JobStatus, run_job
from guiapp.jobs.specs import merge_job, retry
from guiapp.lora.extract import ExtractionSettings, extract_lora
from guiapp.lora.lowrank import RankRule
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.recipe import parse_recipe
from guiapp.system.explain import explain
from tests.faults.harness import cli_explanation, fingerprint, leftovers, looks_finished
from tests.ui.conftest import isolated_settings, make_window, wait_for_job, window  # noqa: F401


def _ties(base: Path, one: Path, two: Path) -> str:
    return (f"merge_method: ties\nbase_model: {base}\nmodels:\n"
            f"  - model: {one}\n    parameters: {{weight: 0.5, density: 0.5}}\n"
            f"  - model: {two}\n    parameters: {{weight: 0.5, density: 0.5}}\n")


def _cli(capsys, *args) -> tuple[int, str]:
    """Run the real CLI in this process; return its exit code and what it printed on stderr."""
    capsys.readouterr()
    code = main([str(arg) for arg in args])
    return code, capsys.readouterr().err


@pytest.fixture
def project(trio, tmp_path) -> Path:
    """A folder holding a base, two fine-tunes and a recipe, as users keep them."""
    folder = tmp_path / "project"
    for name, source in (("base", trio.base), ("one", trio.one), ("two", trio.two)):
        shutil.copytree(source, folder / name)
    (folder / "recipe.yml").write_text(_ties(folder / "base", folder / "one", folder / "two"))
    return folder


@pytest.fixture(scope="module")
def adapter(trio, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("adapter") / "one-lora"
    extract_lora(ExtractionSettings(base=str(trio.base), model=str(trio.one), out=folder, rule=RankRule("fixed", 4)))
    return folder


@pytest.fixture
def previous_output(trio, tmp_path) -> Path:
    """A finished earlier merge: the only kind of folder Mergesmith may replace."""
    out = tmp_path / "merged"
    assert run_job(merge_job(parse_recipe(_ties(trio.base, trio.one, trio.two)), out)).status is JobStatus.DONE
    return out


def _refused(code: int, stderr: str) -> str:
    assert code == 1, stderr
    title, what = cli_explanation(stderr)
    assert title == "The output folder cannot be used", stderr
    return what


@pytest.mark.parametrize("command", ["merge", "extract-lora", "apply-lora"])
def test_overwrite_into_the_folder_holding_the_inputs(command, project, adapter, capsys, seen):
    shutil.copytree(adapter, project / "adapter")
    before = fingerprint(project)
    args = {
        "merge": ["merge", project / "recipe.yml", project],
        "extract-lora": ["extract-lora", "--base", project / "base", "--model", project / "one", "--out", project],
        "apply-lora": ["apply-lora", "--base", project / "base", "--adapter", project / "adapter", "--out", project],
    }[command]
    what = _refused(*_cli(capsys, *args, "--overwrite"))
    assert "input" in what
    assert fingerprint(project) == before and leftovers(project.parent) == []
    seen("outputs", f"{command} --overwrite into the folder holding its inputs", what)


@pytest.mark.parametrize("where", ["the cache itself", "inside the cache", "the folder holding the cache"])
def test_output_is_the_hugging_face_cache(where, trio, tmp_path, monkeypatch, capsys, seen):
    cache = tmp_path / "hf_home" / "hub"
    (cache / "models--org--model" / "blobs").mkdir(parents=True)
    (cache / "models--org--model" / "blobs" / "0123abcd").write_bytes(b"someone's weights")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_ties(trio.base, trio.one, trio.two))
    out = {"the cache itself": cache, "inside the cache": cache / "merged", "the folder holding the cache": cache.parent}
    before = fingerprint(cache, trio.base, trio.one, trio.two)
    what = _refused(*_cli(capsys, "merge", recipe, out[where], "--overwrite"))
    assert "cache" in what
    assert fingerprint(cache, trio.base, trio.one, trio.two) == before
    assert not (cache / "merged").exists() and leftovers(cache) == [] and leftovers(cache.parent) == []
    seen("outputs", f"merge --overwrite into the Hugging Face cache ({where})", what)


@pytest.mark.parametrize("where", ["the adapter folder", "inside the adapter folder"])
def test_a_model_plus_adapter_input_protects_the_adapter(where, trio, adapter, tmp_path, capsys, seen):
    own_adapter = shutil.copytree(adapter, tmp_path / "lora")
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(f"merge_method: linear\nmodels:\n  - model: {trio.one}+{own_adapter}\n"
                      f"    parameters: {{weight: 0.5}}\n  - model: {trio.two}\n    parameters: {{weight: 0.5}}\n")
    out = own_adapter if where == "the adapter folder" else own_adapter / "merged"
    before = fingerprint(own_adapter, trio.one, trio.two)
    what = _refused(*_cli(capsys, "merge", recipe, out, "--overwrite"))
    assert str(own_adapter) in what or "adapter" in what
    assert fingerprint(own_adapter, trio.one, trio.two) == before
    assert not (own_adapter / "merged").exists() and leftovers(own_adapter) == []
    seen("outputs", f"model+adapter input: output is {where}", what)


def test_an_input_whose_files_are_links_protects_where_they_point(trio, tmp_path, capsys, seen):
    """A model folder of symbolic links (as the Hub cache's snapshots are): the folder they resolve into is an input."""
    real = shutil.copytree(trio.one, tmp_path / "store" / "weights")
    linked = tmp_path / "linked-model"
    linked.mkdir()
    for file in real.iterdir():
        (linked / file.name).symlink_to(file)
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_ties(trio.base, linked, trio.two))
    before = fingerprint(real)
    what = _refused(*_cli(capsys, "merge", recipe, real, "--overwrite"))
    assert fingerprint(real) == before
    # The same folder reached through `..` is recognised too.
    dotted = tmp_path / "store" / "weights" / ".." / "weights"
    _refused(*_cli(capsys, "merge", recipe, dotted, "--overwrite"))
    assert fingerprint(real) == before and leftovers(real.parent) == []
    seen("outputs", "output is the folder an input's links resolve into", what)


@pytest.mark.parametrize("target_kind", ["a folder of the user's", "an earlier Mergesmith output"])
def test_a_link_at_the_destination_is_never_followed(target_kind, trio, previous_output, tmp_path, capsys, seen):
    if target_kind == "a folder of the user's":
        target = tmp_path / "photos"
        target.mkdir()
        (target / "holiday.jpg").write_bytes(b"\xff\xd8 not a model")
    else:
        target = previous_output
    link = tmp_path / "out-link"
    link.symlink_to(target, target_is_directory=True)
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_ties(trio.base, trio.one, trio.two))
    before = fingerprint(target)
    what = _refused(*_cli(capsys, "merge", recipe, link, "--overwrite"))
    assert "link" in what
    assert fingerprint(target) == before and link.is_symlink() and leftovers(tmp_path) == []
    seen("outputs", f"--overwrite onto a link to {target_kind}", what)


def test_overwrite_replaces_only_an_earlier_mergesmith_output(trio, previous_output, tmp_path, capsys, seen):
    from guiapp.checkpoints.output_guard import MARKER  # noqa: PLC0415

    inputs = fingerprint(trio.base, trio.one, trio.two)
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_ties(trio.base, trio.one, trio.two))
    # A folder Mergesmith did not write: refused, and the message names what is there.
    users = tmp_path / "thesis"
    users.mkdir()
    (users / "chapter1.tex").write_text("the user's own work")
    before = fingerprint(users)
    what = _refused(*_cli(capsys, "merge", recipe, users, "--overwrite"))
    assert "chapter1.tex" in what and fingerprint(users) == before
    seen("outputs", "--overwrite onto a folder Mergesmith did not write", what)
    # An earlier output the user has since added a file to: refused too, naming the file.
    (previous_output / "notes.md").write_text("my evaluation notes")
    before = fingerprint(previous_output)
    what = _refused(*_cli(capsys, "merge", recipe, previous_output, "--overwrite"))
    assert "notes.md" in what and fingerprint(previous_output) == before
    seen("outputs", "--overwrite onto an earlier output holding a file of the user's", what)
    # The earlier output as Mergesmith left it: replaced, and the replacement is itself marked.
    (previous_output / "notes.md").unlink()
    code, stderr = _cli(capsys, "merge", recipe, previous_output, "--overwrite")
    assert code == 0, stderr
    assert looks_finished(previous_output) and (previous_output / MARKER).is_file()
    assert leftovers(tmp_path) == [] and fingerprint(trio.base, trio.one, trio.two) == inputs


def test_a_folder_that_appears_while_the_merge_runs_is_not_replaced(trio, tmp_path, seen):
    out = tmp_path / "merged"
    inputs = fingerprint(trio.base, trio.one, trio.two)

    def someone_else_writes_there(plan) -> None:
        out.mkdir()
        (out / "their-file.txt").write_text("written by another program")

    with pytest.raises(OutputError) as refused:
        run_merge(parse_recipe(_ties(trio.base, trio.one, trio.two)), MergeSettings(out),
                  before_start=someone_else_writes_there)
    assert sorted(p.name for p in out.iterdir()) == ["their-file.txt"]
    assert leftovers(tmp_path) == [] and fingerprint(trio.base, trio.one, trio.two) == inputs
    seen("outputs", "a folder appears at the destination while the merge runs", explain(refused.value))


def test_with_overwrite_a_folder_swapped_in_meanwhile_is_not_replaced(trio, previous_output, tmp_path, seen):
    """The destination was an earlier output when the job started, and is someone else's folder at its end."""

    def swap(plan) -> None:
        shutil.rmtree(previous_output)
        previous_output.mkdir()
        (previous_output / "their-file.txt").write_text("written by another program")

    with pytest.raises(OutputError) as refused:
        run_merge(parse_recipe(_ties(trio.base, trio.one, trio.two)), MergeSettings(previous_output, overwrite=True),
                  before_start=swap)
    assert sorted(p.name for p in previous_output.iterdir()) == ["their-file.txt"]
    assert leftovers(tmp_path) == []
    seen("outputs", "--overwrite, and the earlier output is swapped for another folder meanwhile",
         explain(refused.value))


def test_two_merges_into_the_same_new_folder_at_once(trio, tmp_path, seen):
    out = tmp_path / "merged"
    recipe = parse_recipe(_ties(trio.base, trio.one, trio.two))
    first_planned, second_finished = threading.Event(), threading.Event()
    outcomes: list[object] = []

    def hold_until_the_second_has_finished(plan) -> None:
        first_planned.set()
        assert second_finished.wait(timeout=300)

    def first() -> None:
        try:
            outcomes.append(run_merge(recipe, MergeSettings(out), before_start=hold_until_the_second_has_finished))
        except Exception as error:  # recorded for the assertion below
            outcomes.append(error)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert first_planned.wait(timeout=300)
        with pytest.raises(OutputError) as refused:
            run_merge(recipe, MergeSettings(out))
    finally:
        second_finished.set()
        thread.join(timeout=300)
    assert len(outcomes) == 1 and not isinstance(outcomes[0], Exception), outcomes
    assert looks_finished(out) and leftovers(tmp_path) == []
    seen("outputs", "two merges into the same new folder at once (the second)", explain(refused.value))


def test_sigterm_of_a_cli_merge_leaves_nothing(trio, tmp_path, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_ties(trio.base, trio.one, trio.two))
    out = tmp_path / "merged"
    before = fingerprint(trio.base, trio.one, trio.two, recipe)
    never = tmp_path / "never-released"  # the signal, not this file, ends the pause
    # A real `mergesmith` program (not a warm child, tests/support/warm_cli.py): the signal must meet the handlers
    # the program itself installs, nothing inherited from a test helper.
    process = subprocess.Popen([sys.executable, "-m", "guiapp", "merge", str(recipe), str(out)],
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, PAUSE_VARIABLE: f"Merging:2:{never}"})
    for line in process.stderr:
        if line.startswith("Paused after step 2 of Merging"):
            assert leftovers(tmp_path), "the merge was expected to be writing its staging folder"
            process.send_signal(signal.SIGTERM)
            break
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 1, rest
    assert "Traceback" not in rest and "Interrupted" in rest
    assert leftovers(tmp_path) == [] and not out.exists()
    assert fingerprint(trio.base, trio.one, trio.two, recipe) == before
    seen("process", "SIGTERM of a CLI merge midway", rest.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["partial", "old"])
def test_leftovers_of_dead_processes_are_cleaned_at_the_next_start(kind, trio, tmp_path, seen):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    left = tmp_path / f".merged.mergesmith-{kind}-{pid}-0123abcd"
    left.mkdir()
    (left / "model.safetensors").write_bytes(b"half a model")
    # Not Mergesmith's: a look-alike link to the user's folder, and a look-alike file.
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep me")
    (tmp_path / f".other.mergesmith-{kind}-{pid}-89abcdef").symlink_to(precious, target_is_directory=True)
    (tmp_path / f".third.mergesmith-{kind}-{pid}-456789ab").write_text("a file, not Mergesmith's folder")
    result = run_job(merge_job(parse_recipe(_ties(trio.base, trio.one, trio.two)), tmp_path / "next"))
    assert result.status is JobStatus.DONE
    assert not left.exists() and (precious / "keep.txt").read_text() == "keep me"
    assert sorted(leftovers(tmp_path)) == sorted([f".other.mergesmith-{kind}-{pid}-89abcdef",
                                                  f".third.mergesmith-{kind}-{pid}-456789ab"])
    seen("outputs", f"a {kind} folder left by a killed run, at the next start", "(removed by the next job)")


def test_a_leftover_of_a_running_job_is_kept(tmp_path):
    with StagedOutput(tmp_path / "out") as staged:
        assert clean_leftovers(tmp_path) == [] and staged.path.is_dir()
        staged.discard()


def test_demo_does_not_replace_a_folder_it_did_not_write(tmp_path, capsys, seen):
    merged = tmp_path / "demo" / "merged"
    merged.mkdir(parents=True)
    (merged / "important.txt").write_text("the user's own file")
    what = _refused(*_cli(capsys, "demo", "--out", tmp_path / "demo"))
    assert "important.txt" in what
    assert sorted(p.name for p in merged.iterdir()) == ["important.txt"] and leftovers(merged.parent) == []
    seen("outputs", "demo --out DIR where DIR/merged is the user's folder", what)
    (merged / "important.txt").unlink()
    merged.rmdir()
    for _ in range(2):  # the demo's own earlier output is replaced, so it can be rerun
        code, stderr = _cli(capsys, "demo", "--out", tmp_path / "demo")
        assert code == 0, stderr
    assert looks_finished(merged) and leftovers(merged.parent) == []


@pytest.mark.parametrize("depth", ["parent", "grandparent"])
def test_the_output_parent_is_a_file(depth, trio, tmp_path, capsys, seen):
    blocker = tmp_path / "results.csv"
    blocker.write_text("a,b\n1,2\n")
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_ties(trio.base, trio.one, trio.two))
    out = blocker / "merged" if depth == "parent" else blocker / "runs" / "merged"
    what = _refused(*_cli(capsys, "merge", recipe, out))
    assert "results.csv" in what and "file" in what
    assert blocker.read_text() == "a,b\n1,2\n"
    seen("outputs", f"the output's {depth} is a file", what)


def test_the_windows_retry_replaces_only_an_earlier_output(trio, previous_output, tmp_path, seen):
    """The window's "Retry with suggested settings" (overwrite) follows the same rule as the CLI."""
    users = tmp_path / "mine"
    users.mkdir()
    (users / "notes.txt").write_text("the user's own file")
    recipe = parse_recipe(_ties(trio.base, trio.one, trio.two))
    refused = run_job(merge_job(recipe, users))
    explanation = explain(refused.error)
    assert refused.status is JobStatus.FAILED and explanation.remedy is None  # nothing to offer: not ours
    forced = run_job(retry("merge", merge_job(recipe, users).spec, {"overwrite": True}))
    assert forced.status is JobStatus.FAILED and (users / "notes.txt").read_text() == "the user's own file"
    seen("outputs", "the window's retry with overwrite onto the user's folder", explain(forced.error))
    again = run_job(merge_job(recipe, previous_output))
    assert again.status is JobStatus.FAILED and explain(again.error).replace_with.changes == {"overwrite": True}
    job = merge_job(recipe, previous_output)
    assert run_job(retry(job.kind, job.spec, {"overwrite": True})).status is JobStatus.DONE
    assert leftovers(tmp_path) == []


def test_the_tokenizer_donor_is_an_input(trio, previous_output, tmp_path, capsys, seen):
    donor = previous_output  # an earlier output, which --overwrite could otherwise replace
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(f"merge_method: linear\nmodels:\n  - model: {trio.base}\n    parameters: {{weight: 0.5}}\n"
                      f"  - model: {trio.one}\n    parameters: {{weight: 0.5}}\n"
                      f"tokenizer:\n  source: {donor}\n")
    before = fingerprint(donor)
    what = _refused(*_cli(capsys, "merge", recipe, donor, "--overwrite"))
    assert fingerprint(donor) == before and leftovers(tmp_path) == []
    seen("outputs", "merge --overwrite onto the tokenizer donor's folder", what)


@pytest.mark.parametrize("how", ["the kernel's rename without replacing", "exclusive mkdir, then rename"])
def test_the_final_rename_never_replaces(how, tmp_path, monkeypatch):
    from guiapp.checkpoints import output_guard  # noqa: PLC0415

    if how == "exclusive mkdir, then rename":  # file systems without renameat2 / renamex_np
        monkeypatch.setattr(output_guard, "_native_rename_noreplace", lambda source, destination: False)
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "model.safetensors").write_bytes(b"new")
    for existing in ("empty", "full"):
        there = tmp_path / existing
        there.mkdir()
        if existing == "full":
            (there / "theirs.txt").write_text("theirs")
        with pytest.raises(FileExistsError):
            output_guard.rename_noreplace(staging, there)
        assert sorted(p.name for p in there.iterdir()) == ([] if existing == "empty" else ["theirs.txt"])
    output_guard.rename_noreplace(staging, tmp_path / "free")
    assert (tmp_path / "free" / "model.safetensors").read_bytes() == b"new" and not staging.exists()


def test_the_window_cannot_replace_a_folder_it_did_not_write(qtbot, window, models, tmp_path, seen):
    """Ticking "Replace the folder" over the user's own folder: the page says no before the run, the job refuses,
    and neither a retry with other settings nor Replace is offered."""
    users = tmp_path / "mine"
    users.mkdir()
    (users / "notes.txt").write_text("the user's own file")
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump(
        {"merge_method": "linear", "models": [{"model": str(models.tune_a), "parameters": {"weight": 0.5}},
                                              {"model": str(models.tune_b), "parameters": {"weight": 0.5}}]},
        sort_keys=False))
    page.output_edit.setText(str(users))
    page.overwrite_check.setChecked(True)
    qtbot.waitUntil(lambda: "not made by Mergesmith" in page.output_message.text(), timeout=60_000)
    record = wait_for_job(qtbot, window, page.run())
    assert record.status == "failed" and (users / "notes.txt").read_text() == "the user's own file"
    offered = window.jobs.explanation.buttons
    assert RETRY_WITH not in offered and REPLACE not in offered, list(offered)
    assert sorted(p.name for p in users.iterdir()) == ["notes.txt"] and leftovers(tmp_path) == []
    seen("outputs", "the window, Replace ticked, over the user's folder", page.output_message.text())


def test_demo_does_not_write_into_a_folder_of_the_users_named_like_a_sample(tmp_path, capsys, seen):
    taken = tmp_path / "demo" / "tiny-base"
    taken.mkdir(parents=True)
    (taken / "model.safetensors").write_bytes(b"the user's own weights")
    what = _refused(*_cli(capsys, "demo", "--out", tmp_path / "demo"))
    assert (taken / "model.safetensors").read_bytes() == b"the user's own weights"
    seen("outputs", "demo --out DIR where DIR/tiny-base is the user's folder", what)
