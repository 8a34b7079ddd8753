"""Model references for the engine: folders, Hub ids made local, offline use, header-only metadata."""

from __future__ import annotations

import json

import pytest

from guiapp.errors import CheckpointError, OfflineError, RevisionNotFoundError
from guiapp.hub.connection import set_offline
from guiapp.hub.headers import read_folder_headers
from guiapp.hub.references import ModelRef
from guiapp.hub.resolve import read_model_metadata, resolve_model


@pytest.fixture
def published(hub_env, samples):
    hub_env.server.add_model("org/base", samples.base, branches=("main", "v1.0"))
    hub_env.server.add_model("org/adapter", samples.adapter)
    return hub_env.server


def test_a_missing_folder_is_named_when_it_is_used():
    ref = ModelRef.parse("/no/such/folder/model")
    assert ref.is_local
    with pytest.raises(CheckpointError, match="/no/such/folder/model does not exist"):
        resolve_model(ref)
    with pytest.raises(CheckpointError, match="/no/such/folder/model does not exist"):
        read_model_metadata(ref)


def test_local_folder_is_itself(samples):
    assert resolve_model(ModelRef.parse(str(samples.base))) == samples.base.resolve()


def test_hub_model_is_downloaded_once_then_works_offline(published, samples):
    folder = resolve_model(ModelRef.parse("org/base@v1.0"))
    assert (folder / "model.safetensors").read_bytes() == (samples.base / "model.safetensors").read_bytes()
    published.reset_counters()
    assert resolve_model(ModelRef.parse("org/base@v1.0"), offline=True) == folder
    set_offline(True)
    assert resolve_model(ModelRef.parse("org/base@v1.0")) == folder
    assert published.requests == []  # offline means no request at all


def test_offline_and_not_downloaded_names_the_model(published):
    with pytest.raises(OfflineError) as caught:
        resolve_model(ModelRef.parse("org/base"), offline=True)
    assert "org/base" in str(caught.value) and "download" in caught.value.hint.lower()
    assert published.requests == []


def test_metadata_of_a_hub_model_without_its_weights(published, samples):
    metadata = read_model_metadata(ModelRef.parse("org/base"))
    assert metadata.tensors == read_folder_headers(samples.base)
    assert metadata.config == json.loads((samples.base / "config.json").read_text())
    assert published.bytes_sent("org/base", "model.safetensors") <= 100_001
    record = metadata.tensors["model.embed_tokens.weight"]
    assert (record.shape, record.dtype) == ((512, 128), "BF16")


def test_metadata_of_local_and_offline_models(published, samples):
    local = read_model_metadata(ModelRef.parse(str(samples.adapter)))
    assert local.config["peft_type"] == "LORA" and local.tensors == read_folder_headers(samples.adapter)
    with pytest.raises(OfflineError, match="org/adapter"):
        read_model_metadata(ModelRef.parse("org/adapter"), offline=True)
    resolve_model(ModelRef.parse("org/adapter"))
    assert read_model_metadata(ModelRef.parse("org/adapter"), offline=True).tensors == local.tensors


def test_a_revision_names_the_version(published):
    folder = resolve_model(ModelRef.parse("org/base"))
    assert resolve_model(ModelRef.parse("org/base@v1.0")) == folder  # already cached: the tag is recorded
    assert resolve_model(ModelRef.parse("org/base@v1.0"), offline=True) == folder
    assert folder.name == published.models["org/base"].sha
    with pytest.raises(RevisionNotFoundError, match="'v2.0'"):
        read_model_metadata(ModelRef.parse("org/base@v2.0"))
    with pytest.raises(RevisionNotFoundError, match="'v2.0'"):
        resolve_model(ModelRef.parse("org/base@v2.0"))
