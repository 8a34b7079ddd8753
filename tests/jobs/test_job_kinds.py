"""The registry of job kinds: every kind's settings are one dataclass that survives the history file, and the
history an earlier version saved still loads."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from guiapp.jobs.history import history_path, load_history
from guiapp.jobs.runner import JobSpec, JobStatus
from guiapp.jobs.specs import JOB_KINDS, MergeSpec, job_from_spec, job_kind, models_to_try, retry, spec_of

_RECIPE = {"merge_method": "linear", "models": [{"model": "org/a", "parameters": {"weight": 0.5}},
                                                {"model": "org/b", "parameters": {"weight": 0.5}}]}
# One set of settings per kind, every one changed from its default so a setting lost on the way shows.
SAMPLES: dict[str, dict] = {
    "merge": {"recipe": _RECIPE, "output": "/models/merged", "device": "cuda:0", "seed": 7, "shard_bytes": 1 << 20,
              "overwrite": True, "force": True, "compute_dtype": "recipe", "threads": 2},
    "extract": {"base": "org/base", "model": "org/tune", "output": "/models/adapter", "rank_mode": "energy",
                "rank_value": 0.9, "max_rank": 64, "solver": "full", "include": "q_proj", "exclude": "lm_head",
                "embeddings": "skip", "dtype": "bfloat16", "device": "cuda:0", "compute_dtype": "float64",
                "overwrite": True, "force": True, "threads": 3},
    "apply": {"base": "org/base", "adapter": "/models/adapter", "output": "/models/full", "scale": 0.5,
              "dtype": "float16", "device": "cuda:0", "overwrite": True, "max_shard_size": "1GB", "force": True,
              "threads": 1},
    "moe": {"config_path": "/recipes/moe.yml", "output": "/models/moe", "document": None, "device": "cuda:0",
            "seed": 5, "overwrite": True, "max_shard_size": "1GB", "force": True},
    "lora-resize": {"adapter": "/adapters/a", "output": "/adapters/small", "rank": 8, "energy": None,
                    "overwrite": True},
    "lora-merge": {"adapters": ["/adapters/a", "/adapters/b"], "weights": [1.0, 0.5], "method": "svd",
                   "output": "/adapters/both", "rank": 16, "density": None, "overwrite": True},
    "export-gguf": {"model": "/models/merged", "output": "/models/merged.gguf", "gguf_type": "q4_k_m", "check": True,
                    "text": "Some words.", "threads": 2, "modelfile": True},
    "download": {"repo_id": "org/base", "revision": "main"},
    "lab": {"recipe": "/recipes/r.yml", "text": "/texts/t.txt", "trials": 12, "output": "/labs/one", "seed": 4,
            "engine": "ray", "ray_address": "10.0.0.2:6379", "holdout": 0.2, "tune": "weight", "window": 128,
            "device": "cuda:0", "prompts": "/texts/p.jsonl"},
    "try": {"references": ["org/a", "org/b"], "prompt": "Hello", "max_new_tokens": 9, "sample": True, "seed": 3,
            "temperature": 0.5, "top_p": 0.8, "long_prompt": "refuse", "device": "cuda:0", "dtype": "float32"},
    "perplexity": {"references": ["org/a"], "text": "The cat sat.", "window": 64, "device": "cuda:0",
                   "dtype": "bfloat16"},
    "publish": {"folder": "/models/merged", "repo_id": "me/merged", "private": False, "card": "# Card",
                "any_folder": True},
}


def test_every_kind_has_a_sample_here():
    assert set(SAMPLES) == set(JOB_KINDS)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_kind_round_trips_through_its_spec_dataclass(kind):
    row = job_kind(kind)
    settings = spec_of(kind, SAMPLES[kind])
    assert isinstance(settings, row.spec) and issubclass(row.spec, JobSpec) and row.spec.kind == kind
    assert settings.to_dict() == SAMPLES[kind]  # every setting kept, none invented
    job = settings.job()
    assert job.kind == kind and job.spec == SAMPLES[kind]
    assert job_from_spec(kind, json.loads(json.dumps(job.spec))).spec == SAMPLES[kind]  # as the history file has it


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_no_kind_names_its_output_otherwise(kind):
    """Every kind that writes something calls where `output`; one that makes a model always writes it."""
    names = {f.name for f in fields(job_kind(kind).spec)}
    assert "out" not in names and ("output" in names or not job_kind(kind).makes_model)


def test_an_unknown_kind_is_refused_by_name_but_its_record_still_shows():
    with pytest.raises(ValueError, match="'fold'"):
        job_from_spec("fold", {})
    newer = job_kind("fold")  # a history written by a newer version
    assert (newer.words, newer.makes_model, newer.changes_disk) == ("fold", False, False)
    assert newer.summary({"output": "/x"}) == "Saved in /x." and models_to_try("fold", {}, "/x") == []


def test_a_change_lands_in_a_merges_recipe_or_its_settings():
    job = retry("merge", SAMPLES["merge"], {"dtype": "float16", "device": "cpu", "force_download": True})
    assert job.spec["recipe"]["dtype"] == "float16" and job.spec["device"] == "cpu"
    assert "dtype" not in SAMPLES["merge"]["recipe"]  # the record's own spec is left as it was
    assert isinstance(spec_of("merge", job.spec), MergeSpec)


def test_a_retry_changes_every_kinds_output_under_one_name():
    for kind in ("merge", "extract", "apply"):
        assert retry(kind, SAMPLES[kind], {"output": "/elsewhere/x"}).spec["output"] == "/elsewhere/x"


def test_models_to_try_come_from_the_kinds_settings():
    assert models_to_try("merge", SAMPLES["merge"], "/models/merged") == ["org/a", "org/b", "/models/merged"]
    assert models_to_try("extract", SAMPLES["extract"], "/a") == ["org/base", "org/tune", "org/base+/a"]
    assert models_to_try("apply", SAMPLES["apply"], "/full") == ["org/base", "/full"]
    assert models_to_try("download", SAMPLES["download"], "/cache") == []


def _old_record(key: str, kind: str, spec: dict, status: str, **more) -> dict:
    """A record as the previous version wrote it (its extractions and applications named the folder "out")."""
    return {"key": key, "title": f"{kind} job", "kind": kind, "spec": spec, "status": status, "created": 1.0e9,
            "started": 1.0e9 + 1, "finished": None, "summary": {}, "log": ["Estimate: …"], "explanation": None,
            "retry_of": None, "last_stage": "", "last_fraction": None, **more}


def test_history_saved_by_the_previous_version_still_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(tmp_path))
    old_extract = {**{k: v for k, v in SAMPLES["extract"].items() if k != "output"}, "out": "/models/adapter"}
    old_apply = {**{k: v for k, v in SAMPLES["apply"].items() if k != "output"}, "out": "/models/full"}
    history_path().parent.mkdir(parents=True, exist_ok=True)
    history_path().write_text(json.dumps({"jobs": [
        _old_record("1-1", "merge", SAMPLES["merge"], "done", finished=1.0e9 + 5),
        _old_record("1-2", "extract", old_extract, "failed", explanation={
            "title": "The output folder cannot be used", "what": "It exists.", "why": "", "fix": "",
            "retry_with": {"output": "/models/adapter-2"}, "raw": "", "recognised": True, "kind": "OutputError",
            "replace_with": {"overwrite": True}}),
        _old_record("1-3", "apply", old_apply, "running"),
    ]}))
    merged, extracted, applied = load_history()
    assert [r.status for r in (merged, extracted, applied)] == [JobStatus.DONE, JobStatus.FAILED,
                                                               JobStatus.INTERRUPTED]
    assert extracted.output == "/models/adapter" and applied.output == "/models/full"
    assert extracted.spec == SAMPLES["extract"] and applied.spec == SAMPLES["apply"]
    assert job_from_spec(extracted.kind, extracted.spec).spec == SAMPLES["extract"]
    assert retry("apply", applied.spec, {"output": "/models/full-2"}).spec["output"] == "/models/full-2"
