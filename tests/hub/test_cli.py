"""`mergesmith hub …` end to end in a subprocess against the test Hub; none of these commands imports torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Runs the CLI in-process of a fresh interpreter and reports its exit code and whether torch got imported.
_RUNNER = (
    "import json, sys\n"
    "from guiapp.__main__ import main\n"
    "code = main(sys.argv[1:])\n"
    "print('@@' + json.dumps({'code': code, 'torch': 'torch' in sys.modules}), file=sys.stderr)\n"
)


def run(hub_env, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, *argv], input=stdin, capture_output=True, text=True, env=hub_env.env, timeout=60
    )
    *stderr, marker = done.stderr.rstrip("\n").split("\n")
    result = json.loads(marker.removeprefix("@@"))
    assert not result["torch"], f"`mergesmith {' '.join(argv)}` imported torch"
    return result["code"], done.stdout, "\n".join(stderr)


@pytest.fixture
def published(hub_env, samples):
    hub_env.server.add_model("org/base", samples.base, downloads=20, card_data={"license": "apache-2.0"})
    hub_env.server.add_model("org/finetune", samples.finetune, downloads=10, card_data={"base_model": "org/base"})
    hub_env.server.add_model("org/big-vocab", samples.big_vocab, downloads=5)
    return hub_env.server


def test_search_and_info(published, hub_env):
    code, out, _ = run(hub_env, "hub", "search", "org", "--sort", "downloads", "--limit", "2", "--json")
    assert code == 0 and [r["repo_id"] for r in json.loads(out)] == ["org/base", "org/finetune"]
    code, out, _ = run(hub_env, "hub", "search", "finetune")
    assert code == 0 and "org/finetune" in out and "org/base" not in out

    code, out, _ = run(hub_env, "hub", "info", "org/finetune", "--json", "--tensors")
    info = json.loads(out)
    assert (
        code == 0 and info["base_models"] == ["org/base"] and info["tensors"]["lm_head.weight"]["shape"] == [512, 128]
    )
    assert published.bytes_sent("org/finetune", "model.safetensors") <= 100_001
    code, out, _ = run(hub_env, "hub", "info", "org/base")
    assert code == 0 and "apache-2.0" in out and "needed for merging" in out


def test_check(published, hub_env, samples):
    code, out, _ = run(hub_env, "hub", "check", "org/base", str(samples.finetune))
    assert code == 0 and "can be merged" in out
    code, out, _ = run(hub_env, "hub", "check", "org/base", "org/big-vocab")
    assert code == 1 and "vocabulary of 520 tokens" in out


def test_download_cache_and_rm(published, hub_env):
    code, out, err = run(hub_env, "hub", "download", "org/base")
    assert code == 0 and "Downloading" in err
    snapshot = out.strip().splitlines()[-1]
    assert snapshot.startswith(str(hub_env.cache_dir)) and snapshot.endswith(published.models["org/base"].sha)

    code, out, _ = run(hub_env, "hub", "cache", "--json")
    (cached,) = json.loads(out)
    assert code == 0 and cached["repo_id"] == "org/base" and cached["revisions"][0]["refs"] == ["main"]

    code, out, _ = run(hub_env, "hub", "rm", "org/base", stdin="n\n")
    assert code == 0 and "frees" in out and "Nothing was deleted" in out
    code, out, _ = run(hub_env, "hub", "rm", "org/base", "--yes")
    assert code == 0 and "Deleted org/base" in out
    code, out, _ = run(hub_env, "hub", "cache")
    assert code == 0 and "no models" in out


def test_failures_are_explained(published, hub_env):
    code, _, err = run(hub_env, "hub", "info", "org/nope")
    assert code == 1 and "org/nope" in err and "spelling" in err
    code, _, err = run(hub_env, "hub", "--offline", "search", "llama")
    assert code == 1 and "offline" in err.lower()


@pytest.mark.parametrize(("written", "said"), [
    ("org/name with space", "is not a Hub model id: an id is org/name"),
    ("a" * 500 + "/b", "is not a Hub model id: an id is org/name"),  # the system refuses to look the name up
    (".", "is a folder on this computer, not a Hub model id"),
])
def test_what_is_not_a_hub_id_is_said_for_what_it_is(hub_env, written, said):
    for command in ("info", "download"):
        code, _, err = run(hub_env, "hub", command, written)
        assert code == 2 and said in err and "Traceback" not in err, err


@pytest.mark.parametrize("limit", ["0", "-5", "100000000", "many"])
def test_a_result_count_out_of_range_is_a_usage_error_before_any_request(limit, capsys):
    """--limit 0 or -5 went to the Hub (and 100,000,000 would page through it); now argparse refuses them."""
    from guiapp.__main__ import main

    with pytest.raises(SystemExit) as stopped:
        main(["hub", "--offline", "search", "llama", "--limit", limit])
    assert stopped.value.code == 2
    assert "is not a number of results: give a whole number from 1 to 1000" in capsys.readouterr().err


def test_rm_without_an_answer_refuses_cleanly(published, hub_env):
    code, _, _ = run(hub_env, "hub", "download", "org/base")
    assert code == 0
    code, out, err = run(hub_env, "hub", "rm", "org/base", stdin="")  # stdin at its end: nobody to answer
    assert code == 1 and "Traceback" not in err and "EOFError" not in err
    assert "add --yes" in out + err and "Nothing was deleted" in out + err
    code, out, _ = run(hub_env, "hub", "cache", "--json")
    assert [cached["repo_id"] for cached in json.loads(out)] == ["org/base"]
