"""Fault class "hostile hub": a compromised mirror (HF_ENDPOINT) sends `../` paths as ETags, commits and versions,
a gzip bomb as model info, fields of the wrong kind, and echoes the access token in its error bodies.

Nothing may be written outside the Hugging Face cache, the user gets a clear message naming the endpoint, and the
token (or a password in HF_ENDPOINT) never reaches the screen, last-error.txt, the job log or the history.
"""

from __future__ import annotations

import base64
import logging
import subprocess
from pathlib import Path

import pytest

from guiapp.__main__ import main
from tests.faults.harness import cli_explanation
from tests.support.hub_server import TEST_TOKEN, make_hostile
from tests.support.warm_cli import WarmCli

ESCAPE = "../../../../escaped/evil.pth"  # from the cache's blobs/ folder: up to the test's own folder
HOSTILE_TITLE = "The Hub sent an answer Mergesmith cannot use"


@pytest.fixture
def hostile(hub_env, trio):
    hub_env.server.add_model("org/model", trio.two)
    return make_hostile(hub_env.server)


def _everything_outside(root: Path, cache: Path) -> set[str]:
    """Every path under `root` except inside the HF cache: what a hostile Hub must not change."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if cache not in p.parents and p != cache}


def _run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize(
    ("case", "mode", "value", "named"),
    [
        ("ETag with ../", "etag", f'"{ESCAPE}"', "ETag"),
        ("weak ETag with ../", "etag", f'W/"{ESCAPE}"', "ETag"),
        ("absolute ETag", "etag", '"/tmp/mergesmith-escaped-evil.pth"', "ETag"),
        ("X-Repo-Commit with ../", "repo_commit", "../../../../escaped", "X-Repo-Commit"),
        ("model info sha ../../..", "sha", "../../../../escaped", "sha"),
        ("model info sha null", "sha", None, "sha"),
    ],
)
def test_server_values_that_become_paths_are_refused(hub_env, hostile, tmp_path, capsys, seen, case, mode, value,
                                                     named):
    if mode == "sha":
        hostile.info_fields["sha"] = value
    else:
        setattr(hostile, mode, value)
    before = _everything_outside(tmp_path, hub_env.cache_dir)

    code, shown = _run_cli(capsys, "hub", "download", "org/model")

    assert code == 1
    assert _everything_outside(tmp_path, hub_env.cache_dir) == before, "a file was written outside the cache"
    assert not Path("/tmp/mergesmith-escaped-evil.pth").exists()
    title, what = cli_explanation(shown)
    assert title == HOSTILE_TITLE, shown
    assert hub_env.server.url in what, "the message must name the endpoint"
    assert named in what and "not a valid" in what, what
    seen("hostile hub", case, f"{title}: {what}")


def test_a_server_sha_never_becomes_a_refs_file(hub_env, hostile, trio, tmp_path, capsys, seen):
    """A merge reads a Hub model's tensor list with the server's sha as the version (the refs file's name)."""
    hostile.info_fields["sha"] = "../../../../escaped"
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(f"merge_method: linear\nmodels:\n  - model: {trio.one}\n    parameters: {{weight: 1}}\n"
                      "  - model: org/model\n    parameters: {weight: 1}\n")
    before = _everything_outside(tmp_path, hub_env.cache_dir)

    code, shown = _run_cli(capsys, "merge", str(recipe), str(tmp_path / "out"))

    assert code == 1
    assert _everything_outside(tmp_path, hub_env.cache_dir) == before
    title, what = cli_explanation(shown)
    assert title == HOSTILE_TITLE and hub_env.server.url in what and "sha" in what, shown
    seen("hostile hub", "merge with a server sha ../", f"{title}: {what}")


def test_a_version_with_dotdot_is_refused_before_any_request(hub_env, hostile, tmp_path, capsys, seen):
    before = _everything_outside(tmp_path, hub_env.cache_dir)
    hub_env.server.reset_counters()

    code, shown = _run_cli(capsys, "hub", "download", "org/model@../../../../escaped")

    assert code == 1 and hub_env.server.requests == []
    assert _everything_outside(tmp_path, hub_env.cache_dir) == before
    title, what = cli_explanation(shown)
    assert "does not recognise" not in title and "../../../../escaped" in what, shown
    seen("hostile hub", "version ../../.. typed by the user", f"{title}: {what}")


@pytest.mark.parametrize(("case", "argv"), [("model info", ("hub", "info", "org/model")),
                                            ("search results", ("hub", "search", "org"))])
def test_a_gzip_bomb_is_refused(hub_env, hostile, capsys, seen, case, argv):
    hostile.gzip_bomb_bytes = 256 * 1024 * 1024  # about 250 KB on the wire

    code, shown = _run_cli(capsys, *argv)

    assert code == 1
    title, what = cli_explanation(shown)
    assert title == HOSTILE_TITLE and "MiB" in what and hub_env.server.url in what, shown
    seen("hostile hub", f"gzip bomb of 256 MiB as {case}", f"{title}: {what}")


def test_odd_search_fields_are_tolerated(hub_env, hostile, capsys, seen):
    hostile.info_fields.update({"downloads": 10**40, "likes": "many", "tags": "llama", "author": 7,
                                "safetensors": {"parameters": {"BF16": "lots"}, "total": -1}})

    code, shown = _run_cli(capsys, "hub", "search", "org")

    assert code == 0 and "org/model" in shown, shown
    seen("hostile hub", "search results with odd fields", "tolerated: " + shown.splitlines()[0])


@pytest.mark.parametrize(
    ("case", "fields"),
    [
        ("lastModified unparseable", {"lastModified": "yesterday"}),
        ("tags a string", {"tags": "llama"}),
        ("downloads a huge number", {"downloads": 10**40, "likes": -5}),
        ("downloads a string", {"downloads": "many"}),
        ("siblings not a list", {"siblings": "model.safetensors"}),
        ("sibling without size", {"siblings": [{"rfilename": "model.safetensors", "size": "big"}]}),
        ("gated a list", {"gated": ["manual"]}),
        ("author a number", {"author": 7}),
    ],
)
def test_odd_model_info_fields_never_end_unrecognised(hub_env, hostile, capsys, seen, case, fields):
    hostile.info_fields.update(fields)

    code, shown = _run_cli(capsys, "hub", "info", "org/model")

    assert "does not recognise" not in shown and "Traceback" not in shown, shown
    if code == 0:
        seen("hostile hub", f"model info: {case}", "tolerated: " + shown.splitlines()[0])
    else:
        title, what = cli_explanation(shown)
        assert title == HOSTILE_TITLE and hub_env.server.url in what, shown
        seen("hostile hub", f"model info: {case}", f"{title}: {what}")


def test_log_lines_of_any_library_are_scrubbed(hub_env, caplog, seen):
    from guiapp.hub.connection import HubConnection  # noqa: PLC0415

    HubConnection.current()  # what every Hub call does first
    endpoint = hub_env.server.url.replace("http://", "http://someone:s3cret-pass@")
    with caplog.at_level(logging.WARNING, logger="huggingface_hub"):
        logging.getLogger("huggingface_hub.file_download").warning("Retrying %s with %s", endpoint,
                                                                   f"Authorization: Bearer {TEST_TOKEN}")
    logged = caplog.records[-1].getMessage()
    assert "s3cret-pass" not in logged and TEST_TOKEN not in logged and hub_env.server.url.split("//")[1] in logged
    seen("hostile hub", "a library's log line quoting a password and a token", logged)


def _cli(warm_cli: WarmCli, args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a process of its own, which reads HF_TOKEN and HF_ENDPOINT from `env` as it starts."""
    return warm_cli.run(args, timeout=120, env=env, cwd=cwd)


def test_a_token_echoed_by_the_server_is_never_shown_or_saved(hub_env, hostile, tmp_path, warm_cli, seen):
    hostile.echo_authorization = True
    hub_env.server.fail_next(403, times=10, path_contains="/api/models/")
    cache = tmp_path / "mergesmith-cache"
    env = {**hub_env.env, "HF_TOKEN": TEST_TOKEN, "MERGESMITH_CACHE_DIR": str(cache)}

    done = _cli(warm_cli, ["hub", "info", "org/model"], env, tmp_path)

    assert done.returncode == 1
    report = (cache / "last-error.txt").read_text()
    assert any(r.authorized for r in hub_env.server.requests), "the token was not sent: the case proves nothing"
    for text in (done.stdout, done.stderr, report):
        assert TEST_TOKEN not in text and "hf_mergesmith" not in text
    assert "Bearer ***" in report or "Bearer" not in report
    title, what = cli_explanation(done.stderr)
    seen("hostile hub", "server echoes the Authorization header", f"{title}: {what}")


def test_a_password_in_hf_endpoint_is_never_shown_or_saved(hub_env, hostile, tmp_path, warm_cli, seen):
    hostile.echo_authorization = True
    cache = tmp_path / "mergesmith-cache"
    endpoint = hub_env.server.url.replace("http://", "http://someone:s3cret-pass@")
    env = {**hub_env.env, "HF_ENDPOINT": endpoint, "MERGESMITH_CACHE_DIR": str(cache)}

    done = _cli(warm_cli, ["hub", "info", "org/missing"], env, tmp_path)

    assert done.returncode == 1
    report = (cache / "last-error.txt").read_text()
    basic = base64.b64encode(b"someone:s3cret-pass").decode()
    for text in (done.stdout, done.stderr, report):
        assert "s3cret-pass" not in text and basic not in text, text
    title, what = cli_explanation(done.stderr)
    assert "does not recognise" not in title
    seen("hostile hub", "a password in HF_ENDPOINT", f"{title}: {what}")



def test_the_window_keeps_an_echoed_token_out_of_the_job_log_and_history(hub_env, hostile, trio, tmp_path, qtbot,
                                                                          monkeypatch, seen):
    from guiapp.jobs.specs import merge_job  # noqa: PLC0415
    from guiapp.merging.recipe import parse_recipe  # noqa: PLC0415
    from guiapp.ui.job_bridge import JobBridge  # noqa: PLC0415

    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    hostile.echo_authorization = True
    hub_env.server.fail_next(403, times=10, path_contains="/api/models/")
    recipe = parse_recipe(f"merge_method: linear\nmodels:\n  - model: {trio.one}\n    parameters: {{weight: 1}}\n"
                          "  - model: org/model\n    parameters: {weight: 1}\n")
    bridge = JobBridge()
    record = bridge.submit(merge_job(recipe, tmp_path / "merged"))
    qtbot.waitUntil(lambda: record.status == "failed", timeout=60_000)
    bridge.shutdown(10)

    assert any(r.authorized for r in hub_env.server.requests), "the token was not sent: the case proves nothing"
    saved = [p for p in hub_env.config_dir.rglob("*") if p.is_file()]
    assert saved, "the job history was not written"
    shown = "\n".join(record.log) + str(record.explanation)
    assert TEST_TOKEN not in shown and not [p.name for p in saved if TEST_TOKEN.encode() in p.read_bytes()]
    assert "Bearer ***" in shown
    seen("hostile hub", "window: a token echoed by the server, job log and history",
         f"{record.explanation['title']}: {record.explanation['what'].splitlines()[0]}")
