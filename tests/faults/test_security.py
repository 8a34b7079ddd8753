"""Fault class "security": the Hub token stays in huggingface_hub's token file, files get the user's permissions,
the network is the configured Hub only, and no code from a model or a recipe ever runs."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import guiapp
from guiapp.jobs.runner import JobStatus, run_job
from guiapp.jobs.specs import merge_job
from guiapp.merging.recipe import parse_recipe
from tests.faults.harness import looks_finished
from tests.support.hub_server import TEST_TOKEN

_CONNECTS: list[tuple] | None = None  # while a test records, every connect() and name lookup goes here


def _audit(event: str, args: tuple) -> None:
    if _CONNECTS is not None and event in ("socket.connect", "socket.getaddrinfo"):
        sock_or_host = args[0]
        if event == "socket.connect" and sock_or_host.family in (socket.AF_INET, socket.AF_INET6):
            _CONNECTS.append(("connect", args[1][:2]))
        elif event == "socket.getaddrinfo":
            _CONNECTS.append(("lookup", (args[0], args[1])))


sys.addaudithook(_audit)  # audit hooks cannot be removed; it records only while _CONNECTS is a list


def _linear(*models) -> str:
    return "merge_method: linear\nmodels:\n" + "".join(
        f"  - model: {m}\n    parameters: {{weight: 1}}\n" for m in models)


@pytest.fixture
def hub(hub_env, trio):
    server = hub_env.server
    server.add_model("org/public", trio.two)
    server.add_model("org/gated", trio.two, gated=True)
    server.add_model("org/members-only", trio.two, gated=True, allowed_users={"someone-else"})
    return hub_env


def test_the_token_stays_in_huggingface_hubs_token_file(hub, trio, qtbot, tmp_path, monkeypatch, warm_cli, seen):
    from guiapp.hub.tokens import sign_in  # noqa: PLC0415
    from guiapp.ui.job_bridge import JobBridge  # noqa: PLC0415

    cache = tmp_path / "mergesmith-cache"
    monkeypatch.setenv("MERGESMITH_CACHE_DIR", str(cache))
    sign_in(TEST_TOKEN)
    token_file = hub.home / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    seen("security", "token file permissions", f"huggingface_hub's token file is {oct(stat.S_IMODE(token_file.stat().st_mode))}")

    # The window's way: jobs through the Qt bridge, which keeps the job history in the config folder.
    bridge = JobBridge()
    done = bridge.submit(merge_job(parse_recipe(_linear(trio.one, "org/gated")), tmp_path / "merged"))
    failed = bridge.submit(merge_job(parse_recipe(_linear(trio.one, "org/members-only")), tmp_path / "refused"))
    qtbot.waitUntil(lambda: done.status == "done" and failed.status == "failed", timeout=60_000)
    assert failed.explanation["title"] == "This model needs your permission first"
    bridge.shutdown(10)
    # The CLI's way: a failure is explained on screen and its full report saved as last-error.txt.
    recipe = tmp_path / "members.yml"
    recipe.write_text(_linear(trio.one, "org/members-only"))
    cli = warm_cli.run(["merge", str(recipe), str(tmp_path / "cli-out")], timeout=120)
    assert cli.returncode == 1 and (cache / "last-error.txt").is_file()
    # An exported recipe (the Merge page's Export writes the recipe's YAML) and the merge's own copy of it.
    (tmp_path / "exported.yml").write_text(yaml.safe_dump(done.spec["recipe"], sort_keys=False))
    assert looks_finished(tmp_path / "merged") and (tmp_path / "merged" / "mergesmith_recipe.yml").is_file()

    written = [p for p in tmp_path.rglob("*") if p.is_file() and p not in (token_file, hub.home / "stored_tokens")]
    assert (hub.config_dir / "jobs.json").is_file() or any(p.suffix == ".json" for p in hub.config_dir.rglob("*"))
    holding = [str(p.relative_to(tmp_path)) for p in written if TEST_TOKEN.encode() in p.read_bytes()]
    assert holding == [], f"the token was written to {holding}"
    shown = cli.stdout + cli.stderr + "\n".join(done.log + failed.log) + str(failed.explanation)
    assert TEST_TOKEN not in shown
    seen("security", f"token never in logs, history, last-error.txt, recipes ({len(written)} files checked)",
         f"{failed.explanation['title']}: {failed.explanation['what'].splitlines()[0]}")


def test_outputs_get_the_users_umask(trio, tmp_path, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_linear(trio.one, trio.two))
    out = tmp_path / "out"
    # A new program, not a warm child (tests/support/warm_cli.py): the umask is in force before anything of
    # Mergesmith's or its libraries is imported, as when the user starts it.
    done = subprocess.run([sys.executable, "-m", "guiapp", "merge", str(recipe), str(out)], capture_output=True,
                          text=True, timeout=120, preexec_fn=lambda: os.umask(0o027))
    assert done.returncode == 0, done.stderr
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [out, *out.iterdir()]}
    assert modes.pop("out") == 0o750 and set(modes.values()) == {0o640}, modes
    seen("security", "umask 027 respected by a CLI merge", "Done: folder 0750, files 0640")


def test_no_network_but_the_configured_hub(hub, trio, tmp_path, capsys, seen):
    global _CONNECTS
    from guiapp.__main__ import main  # noqa: PLC0415

    _CONNECTS = []
    try:
        result = run_job(merge_job(parse_recipe(_linear(trio.one, "org/public")), tmp_path / "merged"))
        searched = main(["hub", "search", "org", "--json"])
        local = run_job(merge_job(parse_recipe(_linear(trio.one, trio.two)), tmp_path / "local"))
    finally:
        connects, _CONNECTS = _CONNECTS, None
    assert result.status is JobStatus.DONE and local.status is JobStatus.DONE and searched == 0
    assert "org/public" in capsys.readouterr().out
    hub_address = hub.server.url.removeprefix("http://").split(":")
    expected = (hub_address[0], int(hub_address[1]))
    targets = {target for kind, target in connects if kind == "connect"}
    lookups = {host for kind, (host, _) in connects if kind == "lookup"}
    assert targets == {expected}, targets
    assert lookups <= {expected[0], "localhost"}, lookups
    seen("security", "network: a Hub merge, a local merge and a Hub search",
         f"Done: {len([c for c in connects if c[0] == 'connect'])} connections, all to the configured Hub "
         f"{hub.server.url}")


def test_no_code_execution_in_the_source(seen):
    """No remote code, no eval/exec, unpickling only with weights_only, YAML only with safe_load."""
    source = Path(guiapp.__file__).parent
    forbidden = {
        "trust_remote_code=True": re.compile(r"trust_remote_code\s*=\s*True"),
        "eval(": re.compile(r"(?<![\w.])eval\("),
        "exec(": re.compile(r"(?<![\w.])exec\("),  # Qt's dialog.exec() is a method, not the builtin
        "yaml.load(": re.compile(r"yaml\.(?:unsafe_)?load\("),
        "pickle.load": re.compile(r"pickle\.loads?\("),
        "torch.load without weights_only=True": re.compile(r"torch\.load\((?![^)]*weights_only=True)"),
    }
    files = sorted(source.rglob("*.py"))
    found = [f"{path.relative_to(source)}:{number}: {name}" for path in files
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for name, pattern in forbidden.items() if pattern.search(line)]
    assert found == []
    seen("security", f"source check of {len(files)} files: " + ", ".join(forbidden), "none found")
