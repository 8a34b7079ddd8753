"""Every JSON (and card YAML) file Mergesmith reads goes through the bounded reader: a named pipe, a document
nested a hundred thousand deep or a huge file is "unreadable", never a hang, a RecursionError or a crash.

The files are Mergesmith's own (job history, timings, added folders, the probe's cache: a damaged config must
not stop the window from starting) and strangers' (an adapter's configuration in a folder the library lists, the
card and report of a folder being published, the configuration and index of a model).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guiapp.checkpoints.samples import write_llama
from guiapp.errors import CheckpointError

HOSTILE = ("fifo", "deep", "huge")


def _make(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:  # 300 MB (sparse: nothing is written), past every limit: refused by its size, never read whole
        with path.open("wb") as stream:
            stream.truncate(300_000_000)


def _finishes(call: Callable[[], Any], fifo: Path | None = None) -> Any:
    """`call()`'s result; fails (after releasing the reader) if it blocks on the pipe for 20 s."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the test below
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():
        if fifo is not None:  # a writer that closes at once ends the reader's wait with end-of-file
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(20)
        pytest.fail(f"{call} blocked reading {fifo}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.fixture
def config(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "config"
    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(folder))
    return folder


@pytest.mark.parametrize("kind", HOSTILE)
def test_damaged_files_of_mergesmith_itself_count_as_empty(config, kind):
    from guiapp.hub.local_folders import list_local_folders
    from guiapp.jobs.durations import TIMINGS_NAME, measured_seconds_per_byte
    from guiapp.jobs.history import HISTORY_NAME, load_history

    for name, read, empty in ((HISTORY_NAME, load_history, []),
                              (TIMINGS_NAME, lambda: measured_seconds_per_byte("merge"), None),
                              ("local_folders.json", list_local_folders, [])):
        _make(config / name, kind)
        assert _finishes(read, config / name) == empty, name


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_damaged_probe_cache_means_probing_again(tmp_path, kind):
    from guiapp.system.probe import load_cached

    _make(tmp_path / "probe.json", kind)
    assert _finishes(lambda: load_cached(tmp_path / "probe.json", {"torch": "x"}), tmp_path / "probe.json") is None


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_strangers_adapter_configuration_is_not_an_adapter(tmp_path, kind):
    from guiapp.jobs.library import adapter_base

    _make(tmp_path / "adapter" / "adapter_config.json", kind)
    assert _finishes(lambda: adapter_base(tmp_path / "adapter"), tmp_path / "adapter" / "adapter_config.json") is None


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("name", ["extraction_report.json", "adapter_config.json"])
def test_publishing_a_folder_with_a_hostile_report_or_configuration_writes_a_card(tmp_path, kind, name):
    from guiapp.hub.publish_card import publish_card

    folder = write_llama(tmp_path / "model")
    _make(folder / name, kind)
    card = _finishes(lambda: publish_card(folder, "me/model", "apache-2.0"), folder / name)
    assert card.startswith("---\nlicense: apache-2.0") and "me/model" in card


@pytest.mark.parametrize("card", [
    "---\na: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n---\n# Card\n",
    "---\n" + "[" * 100_000 + "\n---\n# Card\n",
])
def test_a_hostile_card_front_matter_is_dropped_not_expanded(tmp_path, card):
    from guiapp.hub.publish_card import publish_card

    folder = write_llama(tmp_path / "model")
    (folder / "README.md").write_text(card)
    written = _finishes(lambda: publish_card(folder, "me/model", "mit"))
    assert written.startswith("---\nlicense: mit") and "# Card" in written and len(written) < 20_000


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_models_index_that_is_not_a_file_or_too_big_is_a_checkpoint_error(tmp_path, kind):
    from guiapp.hub.headers import read_folder_headers

    folder = write_llama(tmp_path / "model")
    _make(folder / "model.safetensors.index.json", kind)
    if kind == "fifo":  # not a regular file: the folder's weights are listed instead
        assert _finishes(lambda: read_folder_headers(folder), folder / "model.safetensors.index.json")
        return
    with pytest.raises(CheckpointError):
        _finishes(lambda: read_folder_headers(folder))


def test_the_models_configuration_for_try_is_read_bounded(tmp_path):
    from guiapp.inference.running import _read_config

    folder = tmp_path / "model"
    _make(folder / "config.json", "deep")
    with pytest.raises(CheckpointError, match="nests its JSON too deeply"):
        _read_config(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert _read_config(folder) == {"model_type": "llama"}
