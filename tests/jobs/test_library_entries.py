"""guiapp.jobs.library.library_entries: every model on this computer, and only models (no Qt)."""

from __future__ import annotations

import json

from guiapp.engine.output_guard import write_marker
from guiapp.engine.samples import LlamaShape, write_llama
from guiapp.hub.downloads import download_model
from guiapp.jobs.library import adapter_base, add_local_folder, library_entries
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - the test Hub

TINY = LlamaShape(hidden=32, intermediate=64, layers=1, heads=2, kv_heads=1, vocab=64)


def test_a_header_only_cache_entry_is_not_a_model(hub_env, tmp_path):
    from huggingface_hub import hf_hub_download

    hub_env.server.add_model("org/tiny", write_llama(tmp_path / "tiny", TINY, seed=0))
    # What a look at a Hub model leaves in the cache: its config, no weights.
    hf_hub_download("org/tiny", "config.json", cache_dir=hub_env.cache_dir)
    assert [e.reference for e in library_entries()] == []
    download_model("org/tiny")
    [entry] = library_entries()
    assert (entry.reference, entry.source, entry.kind, entry.where) == ("org/tiny", "downloaded", "model", "Downloaded")
    assert entry.size > 0


def test_outputs_with_the_marker_and_added_folders_are_listed_once(hub_env, tmp_path):
    merged = write_llama(tmp_path / "merged", TINY, seed=1)
    write_marker(merged, "merge")
    unmarked = write_llama(tmp_path / "someone-elses", TINY, seed=2)
    added = write_llama(tmp_path / "added", TINY, seed=3)
    add_local_folder(added)
    add_local_folder(merged)  # also added by hand: listed once, as the output it is
    entries = library_entries([merged, unmarked, tmp_path / "deleted-since"])
    assert [(e.name, e.source) for e in entries] == [("merged", "output"), ("added", "folder")]


def test_an_adapter_is_listed_as_one_with_its_base(hub_env, tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base"}))
    write_marker(adapter, "extract")
    assert adapter_base(adapter) == "org/base"
    assert adapter_base(tmp_path) is None
    [entry] = library_entries([adapter])
    assert (entry.kind, entry.base_model) == ("adapter", "org/base")
