"""guiapp.jobs.library.library_entries: every model on this computer, and only models (no Qt)."""

from __future__ import annotations

import json
from pathlib import Path

from guiapp.checkpoints.output_guard import write_marker
from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.hub.downloads import download_model
from guiapp.jobs.library import (
    UseFit,
    adapter_base,
    add_local_folder,
    details_with_fit,
    downloads_fit,
    library_entries,
)
from guiapp.system.resources import FitLevel
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


GB = 1_000_000_000


def _fit(**changes) -> UseFit:
    values = dict(download_bytes=141 * GB, downloaded=False, disk_free=900 * GB, disk_path=Path("/cache"),
                  working_memory=5 * 2 * GB + 450 * 2**20, largest_tensor=2 * GB, ram_total=64 * GB,
                  ram_available=40 * GB)
    return UseFit(**{**values, **changes})


def test_the_fit_speaks_of_the_download_and_the_streaming_merge():
    fit = _fit()
    assert fit.level is FitLevel.FITS_IN_RAM
    assert fit.badge() == "Fits this machine: 141.0 GB to download, about 10.5 GB of memory to merge or extract"
    assert "141" not in fit.details().split("Memory:")[1]  # a merge streams tensors: the model's size is no memory
    assert _fit(disk_free=100 * GB).badge() == "Not enough disk: 141.0 GB to download, 100.0 GB free"
    assert _fit(disk_free=100 * GB, downloaded=True).level is FitLevel.FITS_IN_RAM  # nothing left to download
    assert _fit(disk_free=150 * GB).level is FitLevel.TIGHT
    assert _fit(ram_total=8 * GB, ram_available=6 * GB).badge().startswith("Too large to merge here")
    assert _fit(working_memory=None, largest_tensor=None).badge() == "Fits this machine: 141.0 GB to download"


def test_details_tell_a_downloaded_model_and_its_working_memory(hub_env, tmp_path):
    hub_env.server.add_model("org/tiny", write_llama(tmp_path / "tiny", TINY, seed=0))
    before = details_with_fit("org/tiny").fit
    assert not before.downloaded and before.download_bytes > 0
    assert before.largest_tensor == TINY.vocab * TINY.hidden * 4  # the embedding, in float32
    download_model("org/tiny")
    assert details_with_fit("org/tiny").fit.downloaded
    assert downloads_fit([0, 10, 10**18]) == [None, FitLevel.FITS_IN_RAM, FitLevel.WILL_NOT_FIT]
