"""One model-metadata layer: the same header gives the same records and the same diagnostics whether the model
is a local folder or a Hub repo (read over range requests), and headers are read once per model version."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.checkpoints.sources import read_headers
from guiapp.errors import CheckpointError
from guiapp.hub.references import ModelRef
from guiapp.merging.merge import MergeSettings, plan_merge, run_merge
from tests.engine.helpers import recipe
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - pytest fixtures

SHAPE = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=256)


def _write_raw_safetensors(path: Path, entries: dict[str, tuple[str, list[int], int]]) -> None:
    """A safetensors file written byte by byte: {name: (dtype code, shape, bytes)}, data zero-filled."""
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in entries.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


@pytest.fixture
def packed_model(tmp_path) -> Path:
    """A model whose one file holds a packed U32 tensor next to a normal one (as GPTQ checkpoints do)."""
    folder = tmp_path / "packed"
    folder.mkdir()
    _write_raw_safetensors(folder / "model.safetensors", {
        "model.embed_tokens.weight": ("F16", [8, 4], 64),
        "model.layers.0.mlp.qweight": ("U32", [4, 4], 64),
    })
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    return folder


def _problem(reference: str) -> CheckpointError:
    with pytest.raises(CheckpointError) as caught:
        read_headers(ModelRef.parse(reference))
    return caught.value


def test_an_unsupported_dtype_gets_the_same_clear_message_locally_and_from_the_hub(packed_model, hub_env):
    hub_env.server.add_model("acme/packed", packed_model)
    local, remote = _problem(str(packed_model)), _problem("acme/packed")
    for error in (local, remote):
        assert 'ensor "model.layers.0.mlp.qweight"' in str(error) and "U32" in str(error)
        assert "quantized" in error.hint
    assert str(local).replace(str(packed_model), "MODEL") == str(remote).replace("acme/packed", "MODEL")
    assert local.hint == remote.hint


def test_a_dtype_no_safetensors_file_has_is_named_as_damage(tmp_path, hub_env):
    folder = tmp_path / "odd"
    folder.mkdir()
    _write_raw_safetensors(folder / "model.safetensors", {"w": ("Q4", [4], 2)})
    (folder / "config.json").write_text("{}")
    hub_env.server.add_model("acme/odd", folder)
    for reference in (str(folder), "acme/odd"):
        error = _problem(reference)
        assert 'tensor "w"' in str(error) and "Q4" in str(error)


def _header_reads(server, repo_id: str) -> int:
    """GET requests for a byte range of a repo's safetensors files: one per header read."""
    return sum(1 for r in server.requests
               if r.method == "GET" and r.range and f"/{repo_id}/resolve/" in r.path and ".safetensors" in r.path)


def test_headers_are_read_once_per_model_version_in_a_session(hub_env, tmp_path):
    base = write_llama(tmp_path / "base", SHAPE, seed=0)
    tuned = write_llama_finetune(tmp_path / "tuned", base, seed=1)
    server = hub_env.server
    server.add_model("acme/base", base)
    server.add_model("acme/tuned", tuned)
    text = ("merge_method: task_arithmetic\nbase_model: acme/base\n"
            "models:\n  - model: acme/tuned\n    parameters: {weight: 1}\n")
    # A window session validates on every edit, then runs the job: the headers cross the network once.
    for _ in range(3):
        plan_merge(recipe(text))
    run_merge(recipe(text), MergeSettings(tmp_path / "out"))
    assert _header_reads(server, "acme/base") == 1
    assert _header_reads(server, "acme/tuned") == 1

    # A new commit on the Hub is a new version: its headers are read again.
    server.add_model("acme/tuned", write_llama_finetune(tmp_path / "tuned2", base, seed=2))
    plan_merge(recipe(text))
    assert _header_reads(server, "acme/tuned") == 2
    assert _header_reads(server, "acme/base") == 1
