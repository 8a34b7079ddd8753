"""Deleting what Mergesmith made: only a folder its marker vouches for, whole, and never what the user put in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from guiapp.checkpoints.output_guard import MARKER, DestinationLock, write_marker
from guiapp.errors import OutputError
from guiapp.jobs.library import plan_output_deletion


def _output(folder: Path) -> Path:
    (folder / "shards").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"x" * 1000)
    (folder / "shards" / "part.safetensors").write_bytes(b"y" * 500)
    write_marker(folder, "merge")
    return folder


def test_an_output_is_deleted_whole_and_says_what_it_frees(tmp_path):
    output = _output(tmp_path / "merged")
    plan = plan_output_deletion(output)
    assert plan.freed_bytes == 1502 and "merge output" in plan.description
    plan.execute()
    assert not output.exists() and tmp_path.is_dir()


def test_a_file_the_user_added_stops_the_deletion_and_nothing_is_deleted(tmp_path):
    output = _output(tmp_path / "merged")
    (output / "my-notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="my-notes.txt"):
        plan_output_deletion(output)
    assert {p.name for p in output.iterdir()} == {MARKER, "config.json", "model.safetensors", "my-notes.txt", "shards"}
    assert (output / "model.safetensors").stat().st_size == 1000


def test_a_folder_mergesmith_did_not_write_is_not_deleted(tmp_path):
    folder = tmp_path / "someone-elses-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"z")
    with pytest.raises(OutputError, match="not a folder Mergesmith wrote"):
        plan_output_deletion(folder)
    assert (folder / "model.safetensors").is_file()


def test_an_output_a_job_is_writing_to_is_not_deleted(tmp_path):
    output = _output(tmp_path / "merged")
    plan = plan_output_deletion(output)
    lock = DestinationLock(output)
    lock.acquire()
    try:
        with pytest.raises(OutputError, match="writing to"):
            plan.execute()
    finally:
        lock.release()
    assert (output / "model.safetensors").is_file()
