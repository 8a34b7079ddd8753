"""Model details and the header-only tensor list, and how Hub failures reach the user."""

from __future__ import annotations

import math

import pytest
from safetensors import safe_open

from guiapp.errors import (
    CheckpointError,
    GatedModelError,
    HubError,
    ModelNotFoundError,
    RateLimitedError,
    RevisionNotFoundError,
)
from guiapp.hub.details import model_details, remote_tensors
from guiapp.hub.headers import read_folder_headers


@pytest.fixture
def published(hub_env, samples):
    server = hub_env.server
    server.add_model("org/base", samples.base, card_data={"license": "apache-2.0"}, downloads=7, likes=3)
    server.add_model("org/finetune", samples.finetune, card_data={"base_model": "org/base", "license": "mit"})
    server.add_model("org/sharded", samples.sharded)
    server.add_model("org/adapter", samples.adapter, library_name="peft")
    server.add_model("org/gated", samples.base, gated=True, card_data={"license": "llama3"})
    server.add_model("org/no-weights", samples.base / "onnx")
    return server


def test_details_before_download(published, samples):
    details = model_details("org/finetune")
    assert details.base_models == ("org/base",)
    assert details.licence == "mit" and not details.gated
    assert details.commit == published.models["org/finetune"].sha
    with safe_open(samples.finetune / "model.safetensors", "pt") as handle:
        total = sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())
    assert details.parameters == total
    assert details.parameters_by_dtype == {"BF16": total}
    assert details.page_url.endswith("/org/finetune")


def test_download_size_counts_only_what_a_merge_needs(published, samples):
    details = model_details("org/base")
    names = {f.name for f in details.files}
    assert {"README.md", "onnx/model.onnx", "tokenizer.json", "config.json", "model.safetensors"} <= names
    assert {f.name for f in details.needed_files} == {"config.json", "model.safetensors", "tokenizer.json"}
    assert details.download_size == sum(
        (samples.base / n).stat().st_size for n in ("config.json", "model.safetensors", "tokenizer.json")
    )
    assert details.repo_size > details.download_size
    assert (details.licence, details.downloads, details.likes) == ("apache-2.0", 7, 3)
    assert details.to_json()["download_size"] == details.download_size


def test_tensor_list_from_headers_without_the_weights(published, samples):
    weights = samples.base / "model.safetensors"
    published.reset_counters()
    tensors = remote_tensors("org/base")
    assert tensors == read_folder_headers(samples.base)
    sent = published.bytes_sent("org/base", "model.safetensors")
    assert 0 < sent <= 100_001  # the client's first range request; the header fits in it
    assert sent < weights.stat().st_size / 8
    assert any(r.range == "bytes=0-100000" and r.status == 206 for r in published.requests)


def test_sharded_and_adapter_repos(published, samples):
    published.reset_counters()
    assert remote_tensors("org/sharded") == read_folder_headers(samples.sharded)
    for shard in {r.file for r in read_folder_headers(samples.sharded).values()}:
        size = (samples.sharded / shard).stat().st_size
        assert published.bytes_sent("org/sharded", shard) <= min(size, 100_001)
    adapter = remote_tensors("org/adapter")
    assert adapter == read_folder_headers(samples.adapter)
    assert all(".lora_" in name for name in adapter)


def test_gated_model_says_where_to_accept_the_licence(published, hub_env):
    details = model_details("org/gated")  # the card is public, the files are not
    assert details.gated and details.licence == "llama3"
    with pytest.raises(GatedModelError) as caught:
        remote_tensors("org/gated")
    assert "org/gated" in str(caught.value)
    assert f"{hub_env.server.url}/org/gated" in caught.value.hint and "token" in caught.value.hint


def test_missing_model_revision_and_weights(published):
    with pytest.raises(ModelNotFoundError, match="org/nope"):
        model_details("org/nope")
    with pytest.raises(ModelNotFoundError, match="org/nope"):
        remote_tensors("org/nope")
    with pytest.raises(RevisionNotFoundError, match="v9"):
        remote_tensors("org/base", "v9")
    with pytest.raises(CheckpointError, match="no safetensors"):
        remote_tensors("org/no-weights")


def test_rate_limit_and_server_errors(published):
    published.fail_next(429, path_contains="/api/models/org/base")
    with pytest.raises(RateLimitedError) as caught:
        model_details("org/base")
    assert "Wait" in caught.value.hint
    published.fail_next(500, path_contains="/api/models/org/base")
    with pytest.raises(HubError, match="500"):
        model_details("org/base")


def test_a_429_reads_the_same_from_the_hub_as_pasted(published):
    from guiapp.system.explain import explain

    published.fail_next(429, path_contains="/api/models/org/base")
    with pytest.raises(RateLimitedError) as caught:
        model_details("org/base")
    live = explain(caught.value)
    pasted = explain("requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: https://x/api")
    assert (live.title, live.why, live.fix) == (pasted.title, pasted.why, pasted.fix)
    assert live.what.startswith(pasted.what.removesuffix(".")) and "org/base" in live.what
