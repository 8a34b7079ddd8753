"""The torch-free safetensors header reader, checked against safetensors' own reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from guiapp.errors import CheckpointError
from guiapp.hub.headers import read_file_header, read_folder_headers


def _reference(folder: Path) -> dict[str, tuple[tuple[int, ...], str, str]]:
    found = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, "pt") as handle:
            for name in handle.keys():
                piece = handle.get_slice(name)
                found[name] = (tuple(piece.get_shape()), piece.get_dtype(), file.name)
    return found


def test_single_file_matches_safetensors(samples):
    records = read_folder_headers(samples.base)
    assert {n: (r.shape, r.dtype, r.file) for n, r in records.items()} == _reference(samples.base)
    assert records["model.embed_tokens.weight"].nbytes == 512 * 128 * 2  # bf16


def test_sharded_folder_follows_the_index(samples):
    records = read_folder_headers(samples.sharded)
    assert len({r.file for r in records.values()}) == 3
    assert {n: (r.shape, r.dtype, r.file) for n, r in records.items()} == _reference(samples.sharded)


def test_reader_does_not_import_torch(samples):
    code = (
        "import sys; from guiapp.hub.headers import read_folder_headers; "
        f"records = read_folder_headers({str(samples.base)!r}); "
        "assert 'torch' not in sys.modules; print(len(records))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) == len(_reference(samples.base))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n", "Git LFS pointer"),
        (b"<!DOCTYPE html><html><body>Rate limited</body></html>" * 3, "HTML"),
        (b"\x80\x02}q\x00(X\x05\x00\x00\x00" * 4, "pickle"),
        (b"\x10\x00", "shorter than a safetensors header"),
    ],
)
def test_files_that_are_not_safetensors_are_named(tmp_path, content, expected):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(content)
    with pytest.raises(CheckpointError) as caught:
        read_file_header(bad)
    assert expected in str(caught.value)
    assert "model.safetensors" in str(caught.value)
    assert "download" in caught.value.hint


def test_truncated_file(tmp_path, samples):
    data = (samples.base / "model.safetensors").read_bytes()
    cut = tmp_path / "model.safetensors"
    cut.write_bytes(data[:200])
    with pytest.raises(CheckpointError, match="cut short"):
        read_file_header(cut)


def test_folder_without_safetensors(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02")
    with pytest.raises(CheckpointError, match="only pickle"):
        read_folder_headers(tmp_path)
