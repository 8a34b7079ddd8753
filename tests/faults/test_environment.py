"""Fault class "environment": the disk, the output folder, memory and the Hub misbehave around a real job."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.jobs.runner import JobListeners, JobStatus, run_job
from guiapp.jobs.specs import download_job, merge_job, retry
from guiapp.merging.recipe import parse_recipe
from guiapp.system.explain import explain
from tests.faults.harness import cli_explanation, fails_cleanly, fingerprint, leftovers
from tests.support.filesystems import small_filesystem
from tests.support.warm_cli import WarmCli

# A few MB: big enough that a dropped connection or a filling disk lands in the middle of a file.
MEDIUM = LlamaShape(hidden=256, intermediate=1024, layers=2, heads=4, kv_heads=2, vocab=2048)
# One 65 M-element embedding (and head): ties holds several float32 copies of it, about 1.8 GB in all.
HUNGRY = LlamaShape(hidden=2048, intermediate=256, layers=1, heads=8, kv_heads=2, vocab=64000)
# Lets Python and torch start (about 650 MB of address space) but not the ties merge of HUNGRY.
ADDRESS_SPACE_LIMIT = 1_500_000_000


@pytest.fixture(scope="module")
def medium(tmp_path_factory) -> Path:
    return write_llama(tmp_path_factory.mktemp("medium") / "model", MEDIUM, dtype=torch.float32, seed=0)


def _linear(*models: Path) -> str:
    return "merge_method: linear\nmodels:\n" + "".join(
        f"  - model: {m}\n    parameters: {{weight: 1}}\n" for m in models)


def test_disk_full_midway(medium, tmp_path, seen):
    with small_filesystem(tmp_path / "disk", "100M") as disk:
        def fill_the_disk(job, event):  # another program takes the rest of the disk once the merge is under way
            if event.stage == "Merging" and event.done == 1 and not (disk / "other.bin").exists():
                with (disk / "other.bin").open("wb") as other:
                    try:
                        while True:
                            other.write(b"\0" * 1_000_000)
                    except OSError:
                        pass

        before = fingerprint(medium)
        out = disk / "out"
        result = run_job(merge_job(parse_recipe(_linear(medium, medium)), out),
                         JobListeners(on_event=fill_the_disk))
        assert result.status is JobStatus.FAILED and (disk / "other.bin").exists()
        explanation = explain(result.error)
        assert explanation.title == "Not enough space or memory" and "filled up" in explanation.what
        assert fingerprint(medium) == before
        assert sorted(p.name for p in disk.iterdir()) == ["other.bin"]  # the partial output is gone
    seen("environment", "disk full midway (tmpfs)", explanation)


def test_output_folder_not_writable(medium, tmp_path, seen):
    with small_filesystem(tmp_path / "ro", "1M", read_only=True) as disk:
        _, explanation = fails_cleanly(merge_job(parse_recipe(_linear(medium)), disk / "out"),
                                       inputs=[medium], out=disk / "out")
    assert explanation.title == "The output folder cannot be used" and "read-only" in explanation.what
    seen("environment", "output folder on a read-only disk", explanation)


def test_output_folder_already_exists(medium, tmp_path, seen):
    """An earlier output there: kept, and replaced on retry. (A folder Mergesmith did not write is never
    replaced: tests/faults/test_outputs.py.)"""
    out = tmp_path / "out"
    job = merge_job(parse_recipe(_linear(medium)), out)
    assert run_job(job).status is JobStatus.DONE
    before = fingerprint(medium, out)
    result = run_job(job)
    explanation = explain(result.error)
    assert result.status is JobStatus.FAILED and fingerprint(medium, out) == before
    assert explanation.title == "The output folder cannot be used" and explanation.replace_with.changes == {"overwrite": True}
    assert explanation.remedy.changes == {"output": str(tmp_path / "out-2")}  # the first suggestion replaces nothing
    assert leftovers(tmp_path) == []
    seen("environment", "output folder already exists", explanation)
    assert run_job(retry(job.kind, job.spec, explanation.replace_with.changes)).status is JobStatus.DONE
    assert (out / "model.safetensors").is_file() and leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def hungry(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hungry")
    model = write_llama(root / "model", HUNGRY, dtype=torch.bfloat16, seed=0)
    # DELLA ranks each row and rescales, so it holds whole tensors (TIES would stream this one in little memory).
    recipe = root / "della.yml"
    recipe.write_text(f"merge_method: della\nbase_model: {model}\nmodels:\n  - model: {model}\n"
                      f"    parameters: {{weight: 1, density: 0.5, epsilon: 0.1}}\n")
    return model, recipe


def _limited_cli(warm_cli: WarmCli, *args: str) -> subprocess.CompletedProcess:
    return warm_cli.run(args, timeout=180, address_space=ADDRESS_SPACE_LIMIT)


@pytest.mark.long
@pytest.mark.parametrize("force", [False, True], ids=["refused by the estimate", "forced past the estimate"])
def test_memory_too_small_under_a_real_address_space_limit(force, hungry, tmp_path, warm_cli, seen):
    model, recipe = hungry
    before = fingerprint(model)
    out = tmp_path / "out"
    done = _limited_cli(warm_cli, "merge", str(recipe), str(out), *(["--force"] if force else []))
    assert done.returncode == 1, done.stderr  # an exit with an explanation, not a crash (no signal, no 137)
    assert "Traceback" not in done.stderr
    title, what = cli_explanation(done.stderr)
    if force:
        assert title in ("Out of memory", "Not enough space or memory") and "memory" in done.stderr
    else:
        assert title == "Not enough space or memory" and "memory limit" in what and "Merging" not in done.stderr
    assert fingerprint(model) == before and not out.exists() and leftovers(tmp_path) == []
    seen("environment", f"RLIMIT_AS {ADDRESS_SPACE_LIMIT / 1e9:.1f} GB, "
         f"{'--force' if force else 'estimate'}", f"{title}: {what}")


@pytest.fixture
def published(hub_env, medium):
    hub_env.server.add_model("org/medium", medium)
    return hub_env.server


def test_connection_dropped_midway_resumes(published, hub_env, medium, seen):
    size = (medium / "model.safetensors").stat().st_size
    published.drop_connection("org/medium", "model.safetensors", after_bytes=size // 2)
    result = run_job(download_job("org/medium"))
    assert result.status is JobStatus.DONE, result.traceback
    folder = Path(result.summary["output"])
    assert (folder / "model.safetensors").read_bytes() == (medium / "model.safetensors").read_bytes()
    assert published.bytes_sent("org/medium", "model.safetensors") < size * 3 // 2  # resumed, not restarted
    assert not list(hub_env.cache_dir.rglob("*.incomplete"))
    seen("environment", "Hub drops the connection mid-download, then comes back",
         f"Done (resumed): {result.log[-1]}")


@pytest.mark.parametrize("status", [429, 500])
def test_hub_refuses(status, published, hub_env, seen):
    published.fail_next(status)  # the model-info request that starts every download
    result = run_job(download_job("org/medium"))
    assert result.status is JobStatus.FAILED
    explanation = explain(result.error)
    expected = {429: "The Hub asked us to slow down", 500: "The Hugging Face Hub could not be reached"}[status]
    assert explanation.title == expected, explanation.render_text()
    assert "org/medium" in explanation.what and "try again" in explanation.fix.lower()
    assert not list(hub_env.cache_dir.rglob("model.safetensors")) and not list(hub_env.cache_dir.rglob("*.incomplete"))
    seen("environment", f"Hub returns HTTP {status}", explanation)
    assert run_job(download_job("org/medium")).status is JobStatus.DONE  # and works once the Hub is back
