"""The test Hub itself answers huggingface_hub as the contract says (other test areas rely on it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import GatedRepoError

from tests.support.hub_server import TEST_TOKEN


@pytest.fixture(autouse=True)
def _routed_to_the_test_hub(hub_env):
    """The endpoint is the test server, as for Mergesmith's own calls: once an earlier test in the process imported
    guiapp.hub, huggingface_hub's client refuses to send a token anywhere but the configured endpoint, so the
    token check below failed or passed with the order the files ran in."""


def test_tree_and_snapshot_download(hub_server, samples, tmp_path):
    hub_server.add_model("org/base", samples.base)
    api = HfApi(endpoint=hub_server.url)
    files = sorted(p.relative_to(samples.base).as_posix() for p in samples.base.rglob("*") if p.is_file())
    assert sorted(api.list_repo_files("org/base")) == files
    folder = snapshot_download("org/base", endpoint=hub_server.url, cache_dir=tmp_path)
    assert (tmp_path / "models--org--base" / "refs" / "main").read_text() == hub_server.models["org/base"].sha
    for name in files:
        assert (samples.base / name).read_bytes() == (Path(folder) / name).read_bytes()


def test_gated_access_and_auth_check(hub_server, samples):
    hub_server.add_model("org/gated", samples.base, gated=True)
    api = HfApi(endpoint=hub_server.url)
    with pytest.raises(GatedRepoError):
        api.auth_check("org/gated", token=False)
    api.auth_check("org/gated", token=TEST_TOKEN)
    assert api.whoami(token=TEST_TOKEN)["name"] == "tester"


def test_a_stopped_server_answers_no_more(hub_server, samples):
    hub_server.add_model("org/base", samples.base)
    api = HfApi(endpoint=hub_server.url)
    assert api.model_info("org/base").id == "org/base"  # leaves a kept-alive connection in the client's pool
    hub_server.stop()
    with pytest.raises(Exception) as caught:
        api.model_info("org/base")
    assert type(caught.value).__name__ in {"ConnectError", "RemoteProtocolError"}
