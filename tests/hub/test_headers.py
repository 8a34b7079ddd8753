"""The torch-free safetensors header reader, checked against safetensors' own reader."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from guiapp.errors import CheckpointError
from guiapp.hub.details import remote_tensors
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


# --- headers from strangers: what the safetensors format forbids is refused, locally and over the Hub ----------


def write_raw_safetensors(path: Path, header: dict | bytes, data: bytes) -> Path:
    """A safetensors file with exactly this header (a dict, or raw JSON bytes) and data, whatever they say."""
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)
    return path


def _f32(*offsets: int) -> dict:
    return {"dtype": "F32", "shape": [(offsets[1] - offsets[0]) // 4], "data_offsets": list(offsets)}


HOSTILE_HEADERS = {
    # Both tensors read the same bytes: what is read as "b" is really "a".
    "overlapping offsets": ({"a": _f32(0, 8), "b": _f32(0, 8)}, 16, ["'a'", "'b'", "overlap"]),
    "offsets out of order and overlapping": ({"a": _f32(4, 12), "b": _f32(0, 8)}, 12, ["'a'", "'b'", "overlap"]),
    "a gap between tensors": ({"a": _f32(0, 8), "b": _f32(12, 20)}, 20, ["'b'", "belong to no tensor"]),
    "data that starts late": ({"a": _f32(8, 16)}, 16, ["'a'", "belong to no tensor"]),
    "bytes after the last tensor": ({"a": _f32(0, 8)}, 24, ["16 bytes", "after the last tensor"]),
    "__metadata__ with a number": ({"__metadata__": {"format": 5}, "a": _f32(0, 8)}, 8,
                                   ["__metadata__", "'format'", "5"]),
    "__metadata__ with a nested table": ({"__metadata__": {"x": {"y": "z"}}, "a": _f32(0, 8)}, 8,
                                         ["__metadata__", "'x'"]),
    "__metadata__ that is a list": ({"__metadata__": ["a"], "a": _f32(0, 8)}, 8, ["__metadata__"]),
}


@pytest.mark.parametrize("case", list(HOSTILE_HEADERS))
def test_a_header_the_format_forbids_is_refused(case, tmp_path):
    header, data_size, named = HOSTILE_HEADERS[case]
    hostile = write_raw_safetensors(tmp_path / "model.safetensors", header, b"\0" * data_size)
    with pytest.raises(CheckpointError) as caught:
        read_file_header(hostile)
    for word in [str(hostile), *named]:
        assert word in str(caught.value), str(caught.value)
    assert "download" in caught.value.hint


def test_the_reference_library_refuses_what_the_reader_refuses(tmp_path):
    """The cases above are not stricter than safetensors itself: its reader refuses each of them too."""
    for number, (header, data_size, _) in enumerate(HOSTILE_HEADERS.values()):
        hostile = write_raw_safetensors(tmp_path / f"{number}.safetensors", header, b"\0" * data_size)
        with pytest.raises(Exception, match="(?i)offset|metadata|buffer|invalid|deserializ"):
            with safe_open(hostile, "pt"):
                pass


def test_a_header_nested_100_000_deep_is_refused(tmp_path):
    body = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    hostile = write_raw_safetensors(tmp_path / "model.safetensors", body, b"")
    with pytest.raises(CheckpointError, match="nests") as caught:
        read_file_header(hostile)
    assert str(hostile) in str(caught.value)


def test_a_shape_of_5000_digits_is_refused(tmp_path):
    body = b'{"a":{"dtype":"F32","shape":[' + b"7" * 5000 + b'],"data_offsets":[0,4]}}'
    hostile = write_raw_safetensors(tmp_path / "model.safetensors", body, b"\0" * 4)
    with pytest.raises(CheckpointError, match="damaged header") as caught:
        read_file_header(hostile)
    assert str(hostile) in str(caught.value)


def test_an_index_that_lists_no_tensors_is_refused(tmp_path, samples):
    folder = Path(shutil.copytree(samples.base, tmp_path / "model"))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {}}))
    with pytest.raises(CheckpointError, match="lists no tensors") as caught:
        read_folder_headers(folder)
    assert "model.safetensors.index.json" in str(caught.value) and "weight_map" in str(caught.value)


@pytest.mark.parametrize("weight_map", [[], {"a": 5}, {"a": ["model.safetensors"]}, "model.safetensors"])
def test_an_index_whose_weight_map_is_not_names_of_files_is_refused(tmp_path, samples, weight_map):
    folder = Path(shutil.copytree(samples.base, tmp_path / "model"))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(CheckpointError, match="weight_map") as caught:
        read_folder_headers(folder)
    assert "model.safetensors.index.json" in str(caught.value)


@pytest.mark.parametrize("case", ["overlapping offsets", "__metadata__ with a number", "nested 100,000 deep",
                                  "bytes after the last tensor", "a gap between tensors"])
def test_a_hostile_header_on_the_hub_is_refused(case, hub_env, samples, tmp_path):
    """The range-request reader refuses the same headers as the local one, in the same words."""
    folder = Path(shutil.copytree(samples.base, tmp_path / "hostile"))
    if case == "nested 100,000 deep":
        header: dict | bytes = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        size, named = 0, ["nests"]
    else:
        header, size, named = HOSTILE_HEADERS[case]
    write_raw_safetensors(folder / "model.safetensors", header, b"\0" * size)
    hub_env.server.add_model("org/hostile", folder)
    with pytest.raises(CheckpointError) as caught:
        remote_tensors("org/hostile")
    for word in ["org/hostile/model.safetensors", *named]:
        assert word in str(caught.value), str(caught.value)


@pytest.mark.parametrize(("case", "said"), [("overlapping offsets", "own bytes"), ("a gap between tensors", "own bytes"),
                                            ("__metadata__ with a number", "text"),
                                            ("bytes after the last tensor", "size does not match")])
def test_the_reference_library_s_words_for_these_headers_are_explained(case, said, tmp_path):
    """The same faults met through another program (transformers loading the file) are explained when pasted."""
    from guiapp.system.explain import explain  # noqa: PLC0415

    header, data_size, _ = HOSTILE_HEADERS[case]
    hostile = write_raw_safetensors(tmp_path / "model.safetensors", header, b"\0" * data_size)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the reference library's own error class
        with safe_open(hostile, "pt"):
            pass
    explanation = explain(f"{type(caught.value).__name__}: {caught.value}")
    assert explanation.kind == "safetensors_header", explanation.render_text()
    assert said in explanation.why, explanation.why


def test_an_index_that_lists_no_tensors_on_the_hub_is_refused(hub_env, samples, tmp_path):
    folder = Path(shutil.copytree(samples.sharded, tmp_path / "hostile"))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {}}))
    hub_env.server.add_model("org/hostile", folder)
    with pytest.raises(CheckpointError, match="lists no tensors") as caught:
        remote_tensors("org/hostile")
    assert "org/hostile/model.safetensors.index.json" in str(caught.value)


def test_null_metadata_is_read_as_the_reference_library_reads_it(tmp_path):
    header = {"__metadata__": None, "a": _f32(0, 8)}
    accepted = write_raw_safetensors(tmp_path / "model.safetensors", header, b"\0" * 8)
    with safe_open(accepted, "pt") as handle:
        assert list(handle.keys()) == ["a"]
    assert list(read_file_header(accepted)) == ["a"]


def test_a_hub_file_cut_short_is_found_from_its_header(hub_env, samples, tmp_path):
    folder = Path(shutil.copytree(samples.base, tmp_path / "cut"))
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) - 1000])
    hub_env.server.add_model("org/cut", folder)
    with pytest.raises(CheckpointError, match="truncated") as caught:
        remote_tensors("org/cut")
    assert "org/cut/model.safetensors" in str(caught.value)


def test_a_header_longer_than_the_first_read_is_read_whole(hub_env, tmp_path):
    import torch  # noqa: PLC0415
    from safetensors.torch import save_file  # noqa: PLC0415

    folder = tmp_path / "many"
    folder.mkdir()
    tensors = {f"model.layers.{i}.mlp.weight": torch.zeros(1) for i in range(3000)}  # a header of ~200 KB
    save_file(tensors, folder / "model.safetensors")
    (folder / "config.json").write_text("{}")
    hub_env.server.add_model("org/many", folder)
    assert remote_tensors("org/many") == read_folder_headers(folder)
