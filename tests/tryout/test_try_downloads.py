"""Trying Hub models downloads them first, all under one Downloading bar, then loads each."""

from __future__ import annotations

import pytest
import torch

from guiapp.jobs.runner import JobListeners, JobStatus, run_job
from guiapp.jobs.tryout import try_job
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - pytest fixtures
from tests.tryout.models import write_causal

pytest.importorskip("transformers")


def test_trying_two_hub_models_downloads_them_under_one_bar(hub_env, tmp_path):
    hub_env.server.add_model("org/a", write_causal(tmp_path / "a", torch.float32, seed=0))
    hub_env.server.add_model("org/b", write_causal(tmp_path / "b", torch.float32, seed=1))
    events = []
    result = run_job(try_job(["org/a", "org/b"], "the cat", max_new_tokens=2),
                     JobListeners(on_event=lambda job, event: events.append(event)))
    assert result.status == JobStatus.DONE, result.log
    stages = [e.stage for e in events]
    downloading = [i for i, stage in enumerate(stages) if stage == "Downloading"]
    assert downloading == list(range(downloading[0], downloading[-1] + 1))  # one stretch, before any loading
    assert downloading[-1] < stages.index("Loading a, model 1 of 2")  # the short name, as the columns say
    assert {e.item.split(":")[0] for e in events if e.stage == "Downloading" and e.item} == {"model org/a",
                                                                                           "model org/b"}
