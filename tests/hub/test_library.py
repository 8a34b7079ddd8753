"""The local library: the HF cache (list, delete with the freed size first), added folders, tokens."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import constants

from guiapp.errors import CheckpointError, InvalidTokenError, ModelNotFoundError, OfflineError
from guiapp.hub.cache import plan_deletion, scan_cache
from guiapp.hub.details import model_details
from guiapp.hub.downloads import download_model
from guiapp.hub.local_folders import add_local_folder, list_local_folders, remove_local_folder
from guiapp.hub.references import ModelRef
from guiapp.hub.resolve import resolve_model
from guiapp.hub.tokens import sign_in, sign_out, signed_in_user, token_source
from tests.support.hub_server import TEST_TOKEN, TEST_USER


@pytest.fixture
def downloaded(hub_env, samples):
    hub_env.server.add_model("org/base", samples.base)
    hub_env.server.add_model("org/large", samples.large)
    download_model("org/base")
    download_model("org/large")
    return hub_env


def test_cache_listing(downloaded, samples):
    models = {m.repo_id: m for m in scan_cache()}
    assert set(models) == {"org/base", "org/large"}
    base = models["org/base"]
    expected = sum((samples.base / n).stat().st_size for n in ("config.json", "model.safetensors", "tokenizer.json"))
    assert base.size == expected and base.files == 3
    (revision,) = base.revisions
    assert revision.refs == ("main",) and revision.commit == downloaded.server.models["org/base"].sha
    assert (revision.folder / "model.safetensors").is_file()
    assert base.to_json()["revisions"][0]["refs"] == ["main"]


def test_delete_shows_the_freed_size_first(downloaded):
    size = next(m.size for m in scan_cache() if m.repo_id == "org/large")
    plan = plan_deletion("org/large")
    assert plan.freed_bytes == size
    assert any(m.repo_id == "org/large" for m in scan_cache())  # planning deletes nothing
    plan.execute()
    assert [m.repo_id for m in scan_cache()] == ["org/base"]
    assert not (downloaded.cache_dir / "models--org--large").exists()
    with pytest.raises(ModelNotFoundError, match="not in the download cache"):
        plan_deletion("org/large")


def test_empty_cache(hub_env, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "never-created"))
    assert scan_cache() == []


def test_local_folders_persist_in_the_config_folder(hub_env, samples, tmp_path):
    assert list_local_folders() == []
    assert add_local_folder(samples.base) == samples.base.resolve()
    add_local_folder(samples.adapter)
    add_local_folder(samples.base)  # once only
    assert list_local_folders() == [samples.base.resolve(), samples.adapter.resolve()]
    stored = json.loads((hub_env.config_dir / "local_folders.json").read_text())
    assert stored == {"folders": [str(samples.base.resolve()), str(samples.adapter.resolve())]}
    remove_local_folder(samples.base)
    assert list_local_folders() == [samples.adapter.resolve()]
    assert (samples.base / "model.safetensors").is_file()  # forgetting never deletes files
    with pytest.raises(CheckpointError, match="does not look like a model folder"):
        add_local_folder(tmp_path)


def test_sign_in_stores_the_token_where_huggingface_hub_keeps_it(hub_env):
    assert token_source() is None and signed_in_user() is None
    assert sign_in(TEST_TOKEN) == TEST_USER
    assert (hub_env.home / "token").read_text().strip() == TEST_TOKEN
    assert token_source() == "stored" and signed_in_user() == TEST_USER
    assert not any(TEST_TOKEN in p.read_text() for p in hub_env.config_dir.rglob("*") if p.is_file())
    sign_out()
    assert not (hub_env.home / "token").exists() and token_source() is None


def test_a_rejected_token_is_not_stored(hub_env, monkeypatch):
    with pytest.raises(InvalidTokenError):
        sign_in("hf_wrong")
    assert not (hub_env.home / "token").exists()
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    assert token_source() == "HF_TOKEN" and signed_in_user() == TEST_USER


def test_hf_hub_offline_keeps_the_library_working(downloaded, samples, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what Mergesmith's offline decision reads
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets at import
    downloaded.server.reset_counters()
    with pytest.raises(OfflineError, match="working offline"):
        model_details("org/base")
    assert {m.repo_id for m in scan_cache()} == {"org/base", "org/large"}
    assert (resolve_model(ModelRef.parse("org/base")) / "model.safetensors").is_file()
    assert add_local_folder(samples.finetune) in list_local_folders()
    assert downloaded.server.requests == []
