"""Downloads into the HF cache: progress, only the needed files, resume, cancel, gated models, disk space."""

from __future__ import annotations

import shutil
import threading
from collections import namedtuple

import pytest

from guiapp.errors import (
    CheckpointError,
    ConnectionLostError,
    GatedModelError,
    InsufficientResourcesError,
    InvalidTokenError,
    JobCancelled,
    OfflineError,
)
from guiapp.hub.downloads import download_model, plan_download
from guiapp.progress import CancelToken, Progress
from tests.support.hub_server import TEST_TOKEN


@pytest.fixture
def published(hub_env, samples):
    server = hub_env.server
    server.add_model("org/base", samples.base)
    server.add_model("org/large", samples.large)
    server.add_model("org/gated", samples.base, gated=True)
    server.add_model("org/members-only", samples.base, gated=True, allowed_users={"someone-else"})
    return server


def test_download_with_progress_events(published, hub_env, samples):
    events = []
    folder = download_model("org/base", progress=Progress(on_event=events.append))
    assert folder.parent.parent == hub_env.cache_dir / "models--org--base"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (folder / name).read_bytes() == (samples.base / name).read_bytes()
    total = sum((samples.base / n).stat().st_size for n in ("config.json", "model.safetensors", "tokenizer.json"))
    assert {e.stage for e in events} == {"Downloading"}
    assert all(e.bytes_total == total and e.total == 3 for e in events)
    done = [e.bytes_done for e in events]
    assert done == sorted(done) and done[-1] == total and events[-1].done == 3
    assert any(e.item.startswith("model org/base: model.safetensors: ") and " of " in e.item for e in events)
    assert events[-1].rate and events[-1].rate > 0
    assert published.bytes_sent("org/base", "README.md") == 0
    assert published.bytes_sent("org/base", "onnx/model.onnx") == 0


def test_a_second_download_uses_the_cache(published):
    download_model("org/base")
    published.reset_counters()
    plan = plan_download("org/base")
    assert plan.cached == {"config.json", "model.safetensors", "tokenizer.json"} and plan.missing_bytes == 0
    events = []
    download_model("org/base", progress=Progress(on_event=events.append))
    assert published.bytes_sent("org/base", "model.safetensors") == 0
    assert events[-1].bytes_done == plan.total_bytes


def test_resume_after_the_connection_drops(published, samples):
    size = (samples.large / "model.safetensors").stat().st_size
    published.drop_connection("org/large", "model.safetensors", after_bytes=size * 3 // 4)
    folder = download_model("org/large")
    assert (folder / "model.safetensors").read_bytes() == (samples.large / "model.safetensors").read_bytes()
    resumed = [r for r in published.requests if r.method == "GET" and r.path.endswith("model.safetensors") and r.range]
    assert resumed and resumed[-1].status == 206 and not resumed[-1].range.startswith("bytes=0-")
    assert published.bytes_sent("org/large", "model.safetensors") < size * 3 // 2  # not fetched twice


@pytest.mark.slow  # huggingface_hub waits a second before each of its five resume attempts
def test_a_connection_that_keeps_breaking_is_reported(published, hub_env):
    published.drop_connection("org/large", "model.safetensors", after_bytes=1000, times=10)
    with pytest.raises(ConnectionLostError) as caught:
        download_model("org/large")
    assert "org/large" in str(caught.value) and "start the download again" in caught.value.hint
    assert not list((hub_env.cache_dir / "models--org--large").rglob("*.incomplete"))


def test_cancel_stops_the_transfer_and_leaves_no_file(published, hub_env, samples):
    """Cancelled as the weights start, the download stops mid-file (the server sent less than the file: it is
    throttled to about four seconds for it, however loaded this machine is) and leaves nothing behind."""
    size = (samples.large / "model.safetensors").stat().st_size
    published.slow_down(size / 4)
    token = CancelToken()

    def cancel_once_started(event):
        if event.item.startswith("model org/large: model.safetensors") and not token.cancelled:
            threading.Thread(target=token.cancel).start()

    with pytest.raises(JobCancelled):
        download_model("org/large", progress=Progress(on_event=cancel_once_started, cancel=token))
    assert published.bytes_sent("org/large", "model.safetensors") < size
    repo = hub_env.cache_dir / "models--org--large"
    assert not list(repo.rglob("model.safetensors")) and not list(repo.rglob("*.incomplete"))


def test_gated_without_then_with_a_token(published, monkeypatch):
    with pytest.raises(GatedModelError) as caught:
        download_model("org/gated")
    assert "accept the licence" in caught.value.hint and "token" in caught.value.hint
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    assert (download_model("org/gated") / "model.safetensors").is_file()
    with pytest.raises(GatedModelError) as caught:
        download_model("org/members-only")  # a valid token whose user has not been granted access
    assert "accept the licence with the account of your token" in caught.value.hint


def test_a_wrong_token_is_reported_as_such(published, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_expired")
    with pytest.raises(InvalidTokenError) as caught:
        download_model("org/base")
    assert "token" in caught.value.hint


def test_a_rejected_token_reads_the_same_from_the_hub_as_pasted(published, monkeypatch):
    """One wording per failure: the Hub client's 401 and a pasted 401 both take the catalogue's, in the window
    too."""
    from dataclasses import asdict

    from guiapp.system.explain import explain

    monkeypatch.setenv("HF_TOKEN", "hf_expired")
    with pytest.raises(InvalidTokenError) as caught:
        download_model("org/base")
    live = explain(caught.value)
    pasted = explain("huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: "
                     "https://x/api/models/org/base (Invalid credentials in Authorization header)")
    assert pasted.kind == "invalid_token"
    assert (live.title, live.why, live.fix) == (pasted.title, pasted.why, pasted.fix)
    assert asdict(live)["window"].get("fix") == asdict(pasted)["window"].get("fix")
    assert live.what.startswith(pasted.what.removesuffix(".")) and "org/base" in live.what


def test_free_space_is_checked_before_any_transfer(published, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(InsufficientResourcesError) as caught:
        download_model("org/large")
    assert "org/large" in str(caught.value) and "1.0 KB free" in str(caught.value)
    assert published.bytes_sent("org/large", "model.safetensors") == 0


def test_a_repo_without_weights_is_refused_before_downloading(published, samples):
    published.add_model("org/onnx-only", samples.base / "onnx")
    with pytest.raises(CheckpointError, match="no model weights"):
        download_model("org/onnx-only")
    assert published.bytes_sent("org/onnx-only", "model.onnx") == 0


def test_unreachable_hub(published, hub_env):
    hub_env.server.stop()
    with pytest.raises(OfflineError, match="Can.t reach the Hugging Face Hub"):
        download_model("org/base")


@pytest.mark.long
def test_a_merge_of_hub_models_downloads_under_one_bar(published, samples, tmp_path):
    """Three Hub models (one of them sharded) fetched for one merge, served slowly, show ONE
    Downloading stage whose fraction never goes backwards, whose counts never pass the totals fixed at its start
    (every file of every model), whose file line names the model, and whose time left is never 0 with bytes to
    go."""
    from guiapp.merging.merge import MergeSettings, run_merge  # noqa: PLC0415
    from tests.engine.helpers import recipe  # noqa: PLC0415

    published.add_model("org/finetune", samples.finetune)
    published.add_model("org/sharded", samples.sharded)
    plans = [plan_download(name) for name in ("org/base", "org/finetune", "org/sharded")]
    published.slow_down(sum(p.total_bytes for p in plans) / 3)  # about three seconds in all
    text = "merge_method: linear\nmodels:\n" + "".join(
        f"  - model: {name}\n    parameters: {{weight: 1}}\n" for name in ("org/base", "org/finetune", "org/sharded"))
    events = []
    run_merge(recipe(text), MergeSettings(tmp_path / "out"), Progress(on_event=events.append))

    stages = [e.stage for e in events]
    first, last = stages.index("Downloading"), len(stages) - 1 - stages[::-1].index("Downloading")
    downloading = events[first:last + 1]
    assert {e.stage for e in downloading} == {"Downloading"}  # one stage, never restarted per model
    assert {(e.total, e.bytes_total) for e in downloading} == {
        (sum(len(p.files) for p in plans), sum(p.total_bytes for p in plans))}
    fractions = [e.fraction for e in downloading]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert all(e.done <= e.total and e.bytes_done <= e.bytes_total for e in downloading)
    assert [e.done for e in downloading] == sorted(e.done for e in downloading)
    named = {e.item.split(":")[0] for e in downloading if e.item}
    assert named == {"model org/base", "model org/finetune", "model org/sharded"}
    assert any(e.item.startswith("model org/sharded: model-00002-of-00003.safetensors") for e in downloading)
    assert all(e.eta is None or e.eta > 0 for e in downloading if e.bytes_done < e.bytes_total)
    assert any(e.rate for e in downloading)


def test_files_already_downloaded_count_as_done_but_not_as_speed(published):
    """A model in the cache fills its part of the bar at once; the rate (and so the time left) stays unknown
    until bytes are actually transferred, instead of a huge rate and "0 s left"."""
    download_model("org/base")
    events = []
    download_model("org/base", progress=Progress(on_event=events.append))
    assert events[-1].bytes_done == events[-1].bytes_total and events[-1].done == events[-1].total == 3
    assert all(e.rate is None and e.eta is None for e in events)
    assert all(e.item.endswith("already downloaded") for e in events if e.item)


def test_a_model_that_cannot_be_checked_says_why_in_the_window_words(published):
    """The recipe check shows why a model cannot be read: the Hub error's words reach the window's own."""
    from guiapp.facts.wording import for_window
    from guiapp.hub.references import ModelRef
    from guiapp.merging.compatibility import check_compatibility

    report = check_compatibility([ModelRef.parse("org/base"), ModelRef.parse("org/gated")])
    problem = report.first("unreadable")
    assert problem is not None and "`hf auth login`" in problem.message
    shown = for_window(problem.message)
    assert "org/gated cannot be checked" in shown and "(Sign in…)" in shown and "hf auth" not in shown
