"""Reading model folders: formats, and every kind of damaged or hostile file giving a clear error."""

from __future__ import annotations

import json
import pickle
import struct

import pytest
import torch

from guiapp.checkpoints.output_guard import clean_leftovers
from guiapp.checkpoints.reading import open_checkpoint
from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.checkpoints.writing import PlannedTensor, ShardedWriter, StagedOutput, parse_size
from guiapp.errors import CheckpointError, OutputError, UnsafeCheckpointError


def test_single_and_sharded_folders_read_the_same(tmp_path):
    single = write_llama(tmp_path / "single", LlamaShape(layers=2), seed=3)
    sharded = write_llama(tmp_path / "sharded", LlamaShape(layers=2), seed=3, shards=3)
    assert len(list(sharded.glob("model-*.safetensors"))) == 3
    with open_checkpoint(single) as a, open_checkpoint(sharded) as b:
        assert a.tensors.keys() == b.tensors.keys()
        for name, info in a.tensors.items():
            assert info.shape == b.tensors[name].shape and info.dtype == torch.bfloat16
            assert torch.equal(a.read(name), b.read(name))
        assert a.config["num_hidden_layers"] == 2


def test_pytorch_bin_loads_with_weights_only(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    weights = {"model.layers.0.mlp.up_proj.weight": torch.randn(4, 3)}
    torch.save(weights, folder / "pytorch_model.bin")
    with open_checkpoint(folder) as checkpoint:
        assert torch.equal(checkpoint.read("model.layers.0.mlp.up_proj.weight"), weights["model.layers.0.mlp.up_proj.weight"])


class _RunsCode:
    """A pickle payload that would create a marker file if it were ever unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_with_code_is_refused_and_never_runs(tmp_path):
    folder = tmp_path / "evil"
    folder.mkdir()
    marker = tmp_path / "pwned"
    torch.save({"weight": torch.zeros(2), "payload": _RunsCode(marker)}, folder / "pytorch_model.bin")
    with pytest.raises(UnsafeCheckpointError, match="run code"):
        open_checkpoint(folder)
    assert not marker.exists()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_RunsCode(marker)))
    with pytest.raises(CheckpointError):
        open_checkpoint(folder)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n", "Git LFS pointer"),
        (b"<!DOCTYPE html><html><body>Access denied</body></html>", "HTML page"),
        (b"\x05\x00", "cut short"),
    ],
)
def test_not_really_safetensors(tmp_path, content, expected):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(content)
    with pytest.raises(CheckpointError, match=expected):
        open_checkpoint(folder)


def test_truncated_download_and_lying_header(tmp_path):
    folder = write_llama(tmp_path / "m", LlamaShape(layers=1))
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="truncated"):
        open_checkpoint(folder)

    header = {"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 32]}}
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"\0" * 64)
    with pytest.raises(CheckpointError, match="should take 64 bytes"):
        open_checkpoint(folder)


def test_missing_shard_and_bad_config(tmp_path):
    folder = write_llama(tmp_path / "m", LlamaShape(layers=2), shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors listed"):
        open_checkpoint(folder)

    other = write_llama(tmp_path / "n", LlamaShape(layers=1))
    (other / "config.json").write_text("{not json")
    with open_checkpoint(other) as checkpoint, pytest.raises(CheckpointError, match="not valid JSON"):
        _ = checkpoint.config


def test_empty_folder(tmp_path):
    with pytest.raises(CheckpointError, match="No model weights"):
        open_checkpoint(tmp_path)


def test_writer_streams_shards_that_safetensors_reads(tmp_path):
    tensors = {
        "a": torch.randn(8, 4).to(torch.bfloat16),
        "scalar": torch.tensor(2.5),
        "ids": torch.arange(7),
        "flag": torch.tensor([True, False]),
        "half": torch.randn(3, 3).half(),
    }
    plan = [PlannedTensor(n, tuple(t.shape), t.dtype) for n, t in tensors.items()]
    with StagedOutput(tmp_path / "out") as staged:
        writer = ShardedWriter(staged.path, plan, max_shard_bytes=64)
        for name, tensor in tensors.items():
            writer.write(name, tensor)
        writer.close()
        staged.commit()
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == len(list((tmp_path / "out").glob("model-*.safetensors"))) > 1
    with open_checkpoint(tmp_path / "out") as checkpoint:
        for name, tensor in tensors.items():
            assert torch.equal(checkpoint.read(name), tensor)


def test_staged_output_refuses_existing_and_cleans_up(tmp_path):
    (tmp_path / "exists").mkdir()
    with pytest.raises(OutputError, match="already exists") as caught:
        StagedOutput(tmp_path / "exists")
    assert caught.value.remedy.changes == {"output": str(tmp_path / "exists-2")}
    assert caught.value.replace_with.changes == {"overwrite": True}
    with pytest.raises(RuntimeError), StagedOutput(tmp_path / "new") as staged:
        (staged.path / "model.safetensors").write_bytes(b"partial")
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists"]


def test_stale_staging_of_a_dead_process_is_removed(tmp_path):
    stale = tmp_path / ".model.mergesmith-partial-999999999-0123abcd"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"x")
    assert clean_leftovers(tmp_path) == [stale]
    assert not stale.exists()


def test_output_inside_an_input_is_refused(tmp_path):
    model = write_llama(tmp_path / "m", LlamaShape(layers=1))
    with pytest.raises(OutputError, match="inside the input"):
        StagedOutput(model / "merged", inputs=(model,))


def test_parse_size():
    assert parse_size("2GB") == 2_000_000_000
    assert parse_size("500MB") == 500_000_000
    assert parse_size("1GiB") == 1024**3
    assert parse_size("5e9") == 5_000_000_000
    with pytest.raises(ValueError):
        parse_size("lots")


# --- files from strangers: every value read is checked where it is read ------------------------------------


def test_bin_with_tensor_names_that_are_not_text_is_refused(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    torch.save({1: torch.zeros(2), "model.embed_tokens.weight": torch.zeros(8, 4)}, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="tensor names") as caught:
        open_checkpoint(folder)
    assert "pytorch_model.bin" in str(caught.value) and "1" in str(caught.value)


@pytest.mark.parametrize("index", ["1000000", "1000000000", "7" * 5000])
def test_a_layer_index_past_any_real_model_is_refused(tmp_path, index):
    from safetensors.torch import save_file  # noqa: PLC0415

    folder = tmp_path / "m"
    folder.mkdir()
    name = f"model.layers.{index}.mlp.weight"
    save_file({"model.layers.0.mlp.weight": torch.zeros(2), name: torch.zeros(2)}, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match="layer") as caught:
        open_checkpoint(folder)
    assert "model.safetensors" in str(caught.value) and len(str(caught.value)) < 600
    assert (index if len(index) < 20 else "5,000 digits") in str(caught.value)


def test_a_layer_index_of_a_large_real_model_is_read(tmp_path):
    from safetensors.torch import save_file  # noqa: PLC0415

    folder = tmp_path / "m"
    folder.mkdir()
    save_file({"model.layers.0.mlp.weight": torch.zeros(2), "model.layers.99999.mlp.weight": torch.zeros(2)},
              folder / "model.safetensors")
    with open_checkpoint(folder) as checkpoint:
        assert "model.layers.99999.mlp.weight" in checkpoint.tensors


HOSTILE_CONFIG_FIELDS = {
    "architectures": ["LlamaForCausalLM", {"a": 1}, [1], "", [""]],
    "model_type": [5, ["llama"]],
    "hidden_size": ["64", -64, True, 64.5, 10**30, ["64"], {"a": -1}, None],
    "num_hidden_layers": ["2", -2, False],
    "vocab_size": [True, "256", 2**40],
    "num_attention_heads": [-4, "four", 1e300],
    "num_key_value_heads": [-1, [2, "2"]],
    "intermediate_size": [{"x": "1"}, [-1]],
    "max_position_embeddings": [-1],
    "torch_dtype": [5, ["float32"], "float32; rm -rf /"],
    "dtype": [{"name": "bf16"}],
    "tie_word_embeddings": ["yes", 1],
    "rope_theta": ["10000", -1.0, float("inf"), True],
    "rope_scaling": ["linear", {"factor": "2"}, {"factor": -2.0, "rope_type": "linear"}, {"rope_type": 5}],
    "text_config": ["x", {"hidden_size": "64"}],
}
CONFIG_CASES = [(field, value) for field, values in HOSTILE_CONFIG_FIELDS.items() for value in values]


@pytest.mark.parametrize(("field", "value"), CONFIG_CASES, ids=[f"{f}={v!r}"[:40] for f, v in CONFIG_CASES])
def test_config_fields_of_the_wrong_kind_are_refused_where_config_json_is_read(tmp_path, field, value):
    from guiapp.errors import ModelConfigError  # noqa: PLC0415
    from guiapp.hub.references import ModelRef  # noqa: PLC0415
    from guiapp.hub.resolve import read_model_metadata  # noqa: PLC0415

    folder = write_llama(tmp_path / "m", LlamaShape(layers=1))
    config = json.loads((folder / "config.json").read_text())
    config[field] = value
    (folder / "config.json").write_text(json.dumps(config))
    if value is None:  # "not set": transformers uses its default
        with open_checkpoint(folder) as checkpoint:
            assert checkpoint.config[field] is None
        return
    for read in (lambda: open_checkpoint(folder).config, lambda: read_model_metadata(ModelRef.parse(str(folder)))):
        with pytest.raises(ModelConfigError) as caught:
            read()
        message = str(caught.value)
        assert str(folder / "config.json") in message and f'"{field}' in message, message
        assert len(message) < 400 and caught.value.hint


@pytest.mark.long
def test_the_default_config_of_every_transformers_architecture_is_accepted():
    """Real configs write some sizes per layer (lists), as tables, as 1200.0 or as 0: none of that is refused."""
    import warnings  # noqa: PLC0415

    from transformers import CONFIG_MAPPING  # noqa: PLC0415

    from guiapp.hub.model_config import check_model_config  # noqa: PLC0415

    checked = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type, config_class in CONFIG_MAPPING.items():
            try:
                config = json.loads(config_class().to_json_string())
            except Exception:  # noqa: BLE001, S112 - a few config classes need arguments; they prove nothing here
                continue
            check_model_config(config, model_type)
            checked += 1
    assert checked > 100


def test_a_config_of_a_real_model_is_read_unchanged(tmp_path):
    folder = write_llama(tmp_path / "m", LlamaShape(layers=1))
    config = json.loads((folder / "config.json").read_text())
    config.update(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "original_max_position_embeddings": 8192}, rope_theta=500000.0, head_dim=None,
                  torch_dtype="bfloat16", sliding_window=None, text_config={"hidden_size": 64})
    (folder / "config.json").write_text(json.dumps(config))
    with open_checkpoint(folder) as checkpoint:
        assert checkpoint.config == config


def test_a_config_number_of_5000_digits_is_refused(tmp_path):
    folder = write_llama(tmp_path / "m", LlamaShape(layers=1))
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text.replace('"hidden_size": 64', '"hidden_size": ' + "7" * 5000))
    with open_checkpoint(folder) as checkpoint, pytest.raises(CheckpointError, match="not valid JSON") as caught:
        assert checkpoint.config is None, "a config that is not JSON was read"
    assert str(folder / "config.json") in str(caught.value) and len(str(caught.value)) < 400


@pytest.mark.parametrize("case", ["config field", "overlap", "layer index", "nesting", "empty index"])
def test_these_errors_pasted_from_a_log_still_say_what_to_do(tmp_path, case):
    """A log carries the message, not the hint: the catalogue knows these messages and says what to do."""
    from guiapp.system.explain import explain  # noqa: PLC0415

    folder = write_llama(tmp_path / "m", LlamaShape(layers=1))
    body = {"overlap": b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                       b'"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
            "nesting": b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "layer index": b'{"model.layers.1000000000.w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'}
    if case in body:
        data = b"\0" * 16 if case == "overlap" else b"" if case == "nesting" else b"\0" * 8
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(body[case])) + body[case] + data)
    elif case == "empty index":
        (folder / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    else:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "hidden_size": "64"}))
    with pytest.raises(CheckpointError) as caught:
        open_checkpoint(folder).config  # noqa: B018 - reading the config is the point
    pasted = explain(f"Traceback (most recent call last):\nguiapp.errors.{type(caught.value).__name__}: {caught.value}")
    assert pasted.fix and pasted.why, pasted.render_text()
    assert "download" in pasted.fix.lower(), pasted.fix
