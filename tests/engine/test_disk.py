"""Output on disks that are read-only, too small from the start, or fill up midway: a clear message, nothing
left behind, inputs untouched."""

from __future__ import annotations

import pytest
import torch

from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.errors import InsufficientResourcesError, OutputError
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.progress import Progress
from tests.engine.helpers import fingerprint, recipe
from tests.support.filesystems import small_filesystem


@pytest.fixture
def model(tmp_path):
    return write_llama(tmp_path / "model", LlamaShape(hidden=128, intermediate=256, layers=2), dtype=torch.float32)


def _text(model) -> str:
    return f"merge_method: linear\nmodels:\n  - model: {model}\n    parameters: {{weight: 1}}\n"


def test_read_only_disk(model, tmp_path):
    with small_filesystem(tmp_path / "ro", "1M", read_only=True) as disk:
        with pytest.raises(OutputError, match="read-only"):
            run_merge(recipe(_text(model)), MergeSettings(disk / "out"))


def test_disk_too_small_is_refused_before_any_work(model, tmp_path):
    before = fingerprint(model)
    with small_filesystem(tmp_path / "small", "1M") as disk:
        with pytest.raises(InsufficientResourcesError, match="needs .* but the disk holding") as caught:
            run_merge(recipe(_text(model)), MergeSettings(disk / "out"))
        assert "Free at least" in caught.value.hint
        assert list(disk.iterdir()) == []
    assert fingerprint(model) == before


def test_disk_that_fills_up_midway(model, tmp_path):
    with small_filesystem(tmp_path / "fills", "80M") as disk:
        def fill_the_disk(event):
            if event.stage == "Merging" and event.done == 1:
                with (disk / "someone-else.bin").open("wb") as other:
                    try:
                        while True:
                            other.write(b"\0" * 1_000_000)
                    except OSError:
                        pass

        with pytest.raises(InsufficientResourcesError, match="filled up"):
            run_merge(recipe(_text(model)), MergeSettings(disk / "out"), Progress(on_event=fill_the_disk))
        assert sorted(p.name for p in disk.iterdir()) == ["someone-else.bin"]


@pytest.mark.parametrize("too_long", ["o" * 240, "o" * 300 + "/out", "ö" * 120])
def test_an_output_name_the_disk_would_refuse_is_refused_first(model, tmp_path, too_long):
    """Names are limited per folder (255 bytes), and the staging folder's name is longer than the output's: a
    name that fits the disk but not its staging sibling failed mid-job as an unexplained OSError."""
    before = fingerprint(model)
    with pytest.raises(OutputError, match="bytes long") as caught:
        run_merge(recipe(_text(model)), MergeSettings(tmp_path / "outs" / too_long))
    assert "shorter" in caught.value.hint
    assert not (tmp_path / "outs").exists() and fingerprint(model) == before


def test_a_name_too_long_for_the_disk_is_explained():
    from guiapp.system.explain import explain

    try:
        open("/tmp/" + "n" * 300, "w")  # noqa: SIM115 - it cannot open
    except OSError as error:
        explanation = explain(error)
    assert explanation.title == "A file or folder name is too long" and "shorter name" in explanation.fix


def test_a_nul_character_in_the_output_or_a_reference_is_said_not_crashed(model, tmp_path):
    from guiapp.errors import RecipeError
    from guiapp.hub.references import ModelRef

    with pytest.raises(OutputError, match="NUL character"):
        run_merge(recipe(_text(model)), MergeSettings(tmp_path / "out\0put"))
    with pytest.raises(RecipeError, match="NUL character") as caught:
        ModelRef.parse("org/na\0me", key=("models", 0, "model"))
    assert caught.value.key == ("models", 0, "model")


def test_a_tilde_for_a_user_this_computer_does_not_have_is_a_path_not_a_crash(tmp_path, monkeypatch):
    """pathlib's expanduser raised RuntimeError ("Could not determine home directory"), shown as not recognised."""
    from guiapp.checkpoints.output_guard import check_output_location
    from guiapp.errors import CheckpointError
    from guiapp.hub.references import ModelRef

    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        ModelRef.parse("~no-such-user-here/model").existing_folder()
    assert check_output_location("~no-such-user-here/out", [], replace=False) is None
