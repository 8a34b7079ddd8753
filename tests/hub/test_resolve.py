"""Model references for the engine: folders, Hub ids made local, offline use, header-only metadata."""

from __future__ import annotations

import json

import pytest

from guiapp.errors import ModelNotFoundError, OfflineError, RevisionNotFoundError
from guiapp.hub.connection import set_offline
from guiapp.hub.headers import read_folder_headers
from guiapp.hub.references import parse_reference
from guiapp.hub.resolve import read_model_metadata, resolve_model


@pytest.fixture
def published(hub_env, samples):
    hub_env.server.add_model("org/base", samples.base, branches=("main", "v1.0"))
    hub_env.server.add_model("org/adapter", samples.adapter)
    return hub_env.server


def test_parse_references(samples):
    assert parse_reference(str(samples.base)).folder == samples.base.resolve()
    ref = parse_reference("org/name@v1.0")
    assert (ref.repo_id, ref.revision, ref.is_local, ref.label) == ("org/name", "v1.0", False, "org/name@v1.0")
    assert parse_reference("gpt2").repo_id == "gpt2"
    with pytest.raises(ModelNotFoundError, match="not an existing folder"):
        parse_reference("/no/such/folder/model")


def test_local_folder_is_itself(samples):
    assert resolve_model(str(samples.base)) == samples.base.resolve()


def test_hub_model_is_downloaded_once_then_works_offline(published, samples):
    folder = resolve_model("org/base@v1.0")
    assert (folder / "model.safetensors").read_bytes() == (samples.base / "model.safetensors").read_bytes()
    published.reset_counters()
    assert resolve_model("org/base@v1.0", offline=True) == folder
    set_offline(True)
    assert resolve_model("org/base@v1.0") == folder
    assert published.requests == []  # offline means no request at all


def test_offline_and_not_downloaded_names_the_model(published):
    with pytest.raises(OfflineError) as caught:
        resolve_model("org/base", offline=True)
    assert "org/base" in str(caught.value) and "download" in caught.value.hint.lower()
    assert published.requests == []


def test_metadata_of_a_hub_model_without_its_weights(published, samples):
    metadata = read_model_metadata("org/base")
    assert metadata.tensors == read_folder_headers(samples.base)
    assert metadata.config == json.loads((samples.base / "config.json").read_text())
    assert published.bytes_sent("org/base", "model.safetensors") <= 100_001
    record = metadata.tensors["model.embed_tokens.weight"]
    assert (record.shape, record.dtype) == ((512, 128), "BF16")


def test_metadata_of_local_and_offline_models(published, samples):
    local = read_model_metadata(str(samples.adapter))
    assert local.config["peft_type"] == "LORA" and local.tensors == read_folder_headers(samples.adapter)
    with pytest.raises(OfflineError, match="org/adapter"):
        read_model_metadata("org/adapter", offline=True)
    resolve_model("org/adapter")
    assert read_model_metadata("org/adapter", offline=True).tensors == local.tensors


def test_revision_argument_overrides_the_reference(published):
    assert parse_reference("org/base@main", "v1.0").revision == "v1.0"
    folder = resolve_model("org/base")
    assert resolve_model("org/base", revision="v1.0") == folder  # already cached: the tag is recorded
    assert resolve_model("org/base@v1.0", offline=True) == folder
    assert folder.name == published.models["org/base"].sha
    with pytest.raises(RevisionNotFoundError, match="'v2.0'"):
        read_model_metadata("org/base", revision="v2.0")
    with pytest.raises(RevisionNotFoundError, match="'v2.0'"):
        resolve_model("org/base@v2.0")
