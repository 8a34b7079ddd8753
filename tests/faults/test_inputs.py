"""Fault class "inputs": strangers' files and settings. Each case runs a real job on a damaged or hostile input
and checks the message, that the inputs are unchanged and that nothing finished-looking is left."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from guiapp.checkpoints.samples import llama_config, llama_tensors, write_checkpoint, write_llama
from guiapp.jobs.runner import JobStatus, run_job
from guiapp.jobs.specs import extract_job, merge_job
from guiapp.merging.recipe import parse_recipe
from tests.faults.conftest import SMALL
from tests.faults.harness import cli_explanation, fails_cleanly, fingerprint, leftovers, looks_finished


def _linear(*models: Path) -> str:
    return "merge_method: linear\nmodels:\n" + "".join(
        f"  - model: {m}\n    parameters: {{weight: 1}}\n" for m in models)


def _merge_fails(text: str, out: Path, inputs: list[Path]):
    return fails_cleanly(merge_job(parse_recipe(text), out), inputs=inputs, out=out)


def _damaged_copy(trio, tmp_path: Path, damage) -> Path:
    """A copy of the base model whose model.safetensors has been rewritten by `damage(bytes) -> bytes`."""
    folder = Path(shutil.copytree(trio.base, tmp_path / "damaged"))
    weights = folder / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    return folder


def _lying_header(data: bytes) -> bytes:
    """The real header with one tensor's end offset moved past the end of the file."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    name = next(n for n in header if n != "__metadata__")
    header[name]["data_offsets"][1] += 10_000_000
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + data[8 + length:]


DAMAGE = {
    "truncated safetensors": (lambda data: data[: len(data) * 2 // 3], "truncated"),
    "header lying about offsets": (_lying_header, "model.safetensors"),
    "Git LFS pointer": (lambda data: b"version https://git-lfs.github.com/spec/v1\noid sha256:"
                        + b"0" * 64 + b"\nsize 123456\n", "Git LFS pointer"),
    "HTML page saved as weights": (lambda data: b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"
                                   + b" " * 200, "HTML"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_weights(case, trio, tmp_path, seen):
    damage, named = DAMAGE[case]
    damaged = _damaged_copy(trio, tmp_path, damage)
    _, explanation = _merge_fails(_linear(trio.one, damaged), tmp_path / "out", [trio.one, damaged])
    assert explanation.title == "A model file cannot be read"
    assert named in explanation.what and "download" in explanation.fix.lower()
    seen("inputs", case, explanation)


class _RunsCode:
    """A pickle payload that would create a marker file if it were ever unpickled."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_bin_whose_payload_would_run_code(trio, tmp_path, seen):
    evil = tmp_path / "evil"
    evil.mkdir()
    shutil.copy(trio.base / "config.json", evil / "config.json")
    marker = tmp_path / "code-ran"
    state = {name: tensor for name, tensor in llama_tensors(SMALL, torch.Generator().manual_seed(0)).items()}
    state["payload"] = _RunsCode(marker)
    torch.save(state, evil / "pytorch_model.bin")
    _, explanation = _merge_fails(_linear(trio.one, evil), tmp_path / "out", [trio.one, evil])
    assert not marker.exists(), "unpickling ran code from the model file"
    assert explanation.title == "A model file contains code"
    assert "safetensors" in explanation.fix
    seen("inputs", "pickle .bin with a code payload", explanation)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_values_in_an_input(value, trio, tmp_path, seen):
    tensors = llama_tensors(SMALL, torch.Generator().manual_seed(3))
    tensors["model.layers.1.self_attn.v_proj.weight"][0, 1] = value
    broken = write_checkpoint(tmp_path / "broken", tensors, llama_config(SMALL, torch.float32), torch.float32)
    _, explanation = _merge_fails(_linear(trio.one, broken), tmp_path / "out", [trio.one, broken])
    assert explanation.title == "The result contains NaN or infinity"
    assert "model.layers.1.self_attn.v_proj.weight" in explanation.what
    seen("inputs", f"{value} in an input tensor", explanation)


def test_tensor_missing_from_one_model(trio, tmp_path, seen):
    """Missing from one of several equal inputs, a tensor is merged from the others and the user is warned (as
    mergekit does); missing from the base that every task vector is measured against, the job is refused."""
    missing = "model.layers.0.mlp.down_proj.weight"
    tensors = llama_tensors(SMALL, torch.Generator().manual_seed(4))
    del tensors[missing]
    partial = write_checkpoint(tmp_path / "partial", tensors, llama_config(SMALL, torch.float32), torch.float32)
    before = fingerprint(trio.one, partial)
    result = run_job(merge_job(parse_recipe(_linear(trio.one, partial)), tmp_path / "merged"))
    assert result.status is JobStatus.DONE and fingerprint(trio.one, partial) == before
    [warning] = result.summary["warnings"]
    assert missing in warning and str(partial) in warning
    seen("inputs", "a tensor missing from one of equal inputs (merged from the others)", f"Warning: {warning}")

    text = f"merge_method: task_arithmetic\nbase_model: {partial}\nmodels:\n  - model: {trio.one}\n" \
           f"    parameters: {{weight: 0.5}}\n"
    _, explanation = _merge_fails(text, tmp_path / "out", [trio.one, partial])
    assert explanation.title == "These models cannot be combined" and missing in explanation.what
    seen("inputs", "a tensor missing from the base model", explanation)


@pytest.mark.parametrize(("case", "change"), [("mismatched shapes", {"intermediate": 96}),
                                              ("mismatched vocabularies", {"vocab": 260})])
def test_models_that_do_not_fit_together(case, change, trio, tmp_path, seen):
    import dataclasses  # noqa: PLC0415

    other = write_llama(tmp_path / "other", dataclasses.replace(SMALL, **change), dtype=torch.float32, seed=9)
    text = f"merge_method: task_arithmetic\nbase_model: {trio.base}\nmodels:\n  - model: {other}\n" \
           f"    parameters: {{weight: 0.5}}\n"
    _, explanation = _merge_fails(text, tmp_path / "out", [trio.base, other])
    assert explanation.title == "These models cannot be combined"
    assert str(other) in explanation.what
    if case == "mismatched vocabularies":
        assert explanation.remedy.changes == {"tokenizer_source": "base"}
    seen("inputs", case, explanation)


def test_config_that_is_not_json(trio, tmp_path, seen):
    folder = Path(shutil.copytree(trio.one, tmp_path / "bad-config"))
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], <html>')
    _, explanation = _merge_fails(_linear(trio.base, folder), tmp_path / "out", [trio.base, folder])
    assert explanation.title == "A model file cannot be read"
    assert "config.json" in explanation.what
    seen("inputs", "config.json that is not JSON", explanation)


def test_recipe_with_yaml_tags_that_construct_objects(trio, tmp_path, warm_cli, seen):
    marker = tmp_path / "code-ran"
    recipe_file = tmp_path / "recipe.yml"
    recipe_file.write_text(f"merge_method: !!python/object/apply:os.system [\"touch {marker}\"]\n"
                           f"models:\n  - model: {trio.one}\n    parameters: {{weight: 1}}\n")
    before = fingerprint(trio.one, recipe_file)
    done = warm_cli.run(["merge", str(recipe_file), str(tmp_path / "out")], timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert not marker.exists(), "a YAML tag constructed an object"
    assert fingerprint(trio.one, recipe_file) == before and not (tmp_path / "out").exists()
    assert leftovers(tmp_path) == []
    title, what = cli_explanation(done.stderr)
    assert title == "The recipe has a problem" and "python/object/apply" in what
    seen("inputs", "recipe with a YAML tag that constructs an object", f"{title}: {what}")


def test_absurd_merge_parameters(trio, tmp_path, seen):
    cases = {
        "density -5": (f"merge_method: ties\nbase_model: {trio.base}\nmodels:\n  - model: {trio.one}\n"
                       f"    parameters: {{weight: 1, density: -5}}\n", "density"),
        "layer range past the end": (f"merge_method: passthrough\nslices:\n  - sources:\n      - model: {trio.one}\n"
                                     f"        layer_range: [0, 40]\n", "past the end"),
    }
    for case, (text, named) in cases.items():
        _, explanation = _merge_fails(text, tmp_path / "out", [trio.base, trio.one])
        assert explanation.title == "The recipe has a problem" and named in explanation.what
        seen("inputs", case, explanation)


def test_negative_rank(trio, tmp_path, seen):
    out = tmp_path / "adapter"
    job = extract_job(str(trio.base), str(trio.one), out, rank_value=-4)
    _, explanation = fails_cleanly(job, inputs=[trio.base, trio.one], out=out)
    assert "rank" in explanation.what.lower()
    seen("inputs", "negative LoRA rank", explanation)


def test_hub_files_that_try_to_escape_the_cache(trio, tmp_path, hub_env, seen):
    """A repo serving a file named `../…` and an index whose weight_map points outside the model folder:
    nothing is written outside the cache, and the merge refuses the repo's file list before reading anything."""
    from huggingface_hub import hf_hub_download  # noqa: PLC0415

    from tests.support.hub_server import ServedFile  # noqa: PLC0415

    repo = write_llama(tmp_path / "repo", SMALL, dtype=torch.float32, seed=7, shards=2)
    index_path = repo / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    index["weight_map"] = {name: ("../../../../escaped.safetensors" if file == shard else file)
                           for name, file in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))
    served = hub_env.server.add_model("org/escape", repo)
    escaping = "../../../../escaped.safetensors"
    served.files[escaping] = ServedFile(repo / shard, (repo / shard).stat().st_size, served.files[shard].sha256)
    watched = tmp_path.parent  # everything this test may write is under here
    before = {p for p in watched.rglob("*")}

    with pytest.raises(ValueError, match="Invalid filename"):  # huggingface_hub's own guard
        hf_hub_download("org/escape", escaping, cache_dir=hub_env.cache_dir)
    out = tmp_path / "out"
    result = run_job(merge_job(parse_recipe(_linear(trio.one, "org/escape")), out))
    assert result.status is JobStatus.FAILED
    from guiapp.system.explain import explain  # noqa: PLC0415

    explanation = explain(result.error)
    assert explanation.title == "The Hub sent an answer Mergesmith cannot use"
    assert "not a valid file name inside the repository" in explanation.what and escaping in explanation.what
    created = {p for p in watched.rglob("*")} - before
    outside = [p for p in created if hub_env.cache_dir not in p.parents and p != hub_env.cache_dir
               and not str(p).startswith(str(Path(hub_env.home)))]
    assert outside == [], f"written outside the cache: {outside}"
    assert not any(p.name == "escaped.safetensors" for p in created)
    assert hub_env.server.bytes_sent("org/escape", escaping) == 0
    assert not looks_finished(out) and leftovers(tmp_path) == []
    seen("inputs", "Hub file names and index entries with ../", explanation)
