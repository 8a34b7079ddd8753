"""The merge lab on tiny models: it finds a planted optimum, its best is what `mergesmith perplexity` says of the
merged best.yml, a run continues where it stopped, a cancel keeps what was learnt, and bad input is explained."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from guiapp.errors import JobCancelled, RecipeError, SettingsError
from guiapp.inference.running import load_model, perplexity, resolve_sources
from guiapp.lab.search import LabSettings, run_lab
from guiapp.lab.store import TRIALS_FILE
from guiapp.progress import CancelToken, Progress


def _lines(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / TRIALS_FILE).read_text().splitlines()]


def _perplexity_of(folder, text_file) -> float:
    loaded = load_model(resolve_sources([str(folder)])[0], torch.float32, "cpu")
    return perplexity(loaded, text_file.read_text()).perplexity


def test_the_lab_beats_both_fine_tunes_and_the_even_start(planted, recipe, tmp_path):
    run = run_lab(LabSettings(recipe, planted.mixed_text, trials=24, out=tmp_path / "lab"))

    endpoints = [_perplexity_of(planted.animals, planted.mixed_text),
                 _perplexity_of(planted.computers, planted.mixed_text)]
    assert run.best.perplexity < run.start.perplexity * 0.8, (run.best, run.start)
    assert run.best.perplexity < min(endpoints) / 2, (run.best, endpoints)
    assert run.start.values == {"models[0].weight": 0.5, "models[1].weight": 0.5}
    assert len(_lines(tmp_path / "lab")) == 25  # the start and 24 trials, each with its time
    assert all(line["seconds"] >= 0 and line["status"] == "done" for line in _lines(tmp_path / "lab"))


@pytest.mark.long
@pytest.mark.usefixtures("probe_in_cache")  # `perplexity` finds the run's probe, as on a second start
def test_the_best_perplexity_is_what_perplexity_says_of_the_merged_best_recipe(planted, recipe, tmp_path, warm_cli):
    done = warm_cli.run(["lab", str(recipe), "--text", str(planted.mixed_text), "--trials", "6",
                         "--out", str(tmp_path / "lab"), "--json"], timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"best_perplexity", "start_perplexity", "trials", "engine"} <= set(summary)
    assert summary["engine"] == "local" and summary["trials"] == 6

    merged = warm_cli.run(["merge", str(tmp_path / "lab" / "best.yml"), str(tmp_path / "merged")], timeout=120)
    assert merged.returncode == 0, merged.stderr
    measured = warm_cli.run(["perplexity", str(tmp_path / "merged"), "--text", str(planted.mixed_text), "--json"],
                            timeout=120)
    assert measured.returncode == 0, measured.stderr
    assert json.loads(measured.stdout)["perplexity"] == summary["best_perplexity"]
    best = yaml.safe_load((tmp_path / "lab" / "best.yml").read_text())
    assert [m["parameters"]["weight"] for m in best["models"]] == list(summary["best_values"].values())


def test_a_second_run_in_the_same_folder_continues_without_running_trials_again(planted, recipe, tmp_path):
    first = run_lab(LabSettings(recipe, planted.mixed_text, trials=4, out=tmp_path / "lab"))
    kept = _lines(tmp_path / "lab")
    heard = []
    second = run_lab(LabSettings(recipe, planted.mixed_text, trials=9, out=tmp_path / "lab"),
                     on_trial=lambda record: heard.append(record.index))

    lines = _lines(tmp_path / "lab")
    assert lines[:5] == kept and len(lines) == 10  # five new trials appended, the first five not run again
    assert sorted(heard) == list(range(10))
    straight = run_lab(LabSettings(recipe, planted.mixed_text, trials=9, out=tmp_path / "straight"))
    assert [r.values for r in second.records] == [r.values for r in straight.records]  # the search went on as if never stopped
    assert second.best.perplexity <= first.best.perplexity


def test_cancel_keeps_every_finished_trial_and_the_best_so_far(planted, recipe, tmp_path):
    token = CancelToken()

    def cancel_after_two(record):
        if record.index == 2:
            token.cancel()

    with pytest.raises(JobCancelled):
        run_lab(LabSettings(recipe, planted.mixed_text, trials=10, out=tmp_path / "lab"), Progress(cancel=token),
                on_trial=cancel_after_two)
    assert [line["trial"] for line in _lines(tmp_path / "lab")] == [0, 1, 2]
    assert (tmp_path / "lab" / "best.yml").is_file()
    assert not list((tmp_path / "lab").glob("*.partial"))
    resumed = run_lab(LabSettings(recipe, planted.mixed_text, trials=10, out=tmp_path / "lab"))
    assert len(resumed.records) == 11


def test_failed_trials_are_recorded_and_the_search_goes_on(planted, recipe, tmp_path):
    # Weights up to 1e38 overflow float32: those candidates come out infinite or NaN.
    run = run_lab(LabSettings(recipe, planted.mixed_text, trials=8, out=tmp_path / "lab",
                              tune="models[0].weight,models[1].weight=0:1e38"))
    failed = [line for line in _lines(tmp_path / "lab") if line["status"] == "failed"]
    assert failed and all(line["perplexity"] is None and line["error"] for line in failed)
    assert len(run.records) == 9 and math.isfinite(run.best.perplexity)


def test_holdout_reports_the_held_out_perplexity_beside_the_tuned_one(planted, recipe, tmp_path):
    run = run_lab(LabSettings(recipe, planted.mixed_text, trials=3, out=tmp_path / "lab", holdout=0.3))
    summary = run.summary()
    assert summary["held_out_best_perplexity"] > 1 and summary["held_out_start_perplexity"] > 1
    assert summary["held_out_best_perplexity"] != summary["best_perplexity"]


def test_a_recipe_with_nothing_numeric_to_tune_is_refused(planted, tmp_path):
    recipe = tmp_path / "stock.yml"
    recipe.write_text(yaml.safe_dump({"merge_method": "model_stock", "base_model": str(planted.base),
                                      "models": [{"model": str(planted.animals)}, {"model": str(planted.computers)}]}))
    with pytest.raises(RecipeError, match="no number for the lab to tune"):
        run_lab(LabSettings(recipe, planted.mixed_text, trials=3, out=tmp_path / "lab"))
    assert not (tmp_path / "lab").exists()


def test_a_text_too_short_to_tell_merges_apart_is_refused(planted, recipe, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("the cat sat on the mat\n")
    with pytest.raises(SettingsError, match="too short for the lab: 7 tokens"):
        run_lab(LabSettings(recipe, short, trials=3, out=tmp_path / "lab"))
    assert not (tmp_path / "lab" / TRIALS_FILE).exists()


def test_a_folder_holding_another_search_is_not_mixed_into(planted, recipe, tmp_path):
    run_lab(LabSettings(recipe, planted.mixed_text, trials=1, out=tmp_path / "lab"))
    with pytest.raises(SettingsError, match="another lab search"):
        run_lab(LabSettings(recipe, planted.mixed_text, trials=1, out=tmp_path / "lab", seed=5))


def test_prompts_add_the_answers_perplexity_to_what_the_search_lowers(planted, recipe, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "a model merges", "answer": "two models into one model"}) + "\n\n"
                       + json.dumps({"prompt": "the dog ran to", "answer": "the park"}) + "\n")
    run = run_lab(LabSettings(recipe, planted.mixed_text, trials=4, out=tmp_path / "lab", prompts=prompts))
    summary = run.summary()
    assert summary["best_answer_perplexity"] > 1 and summary["start_answer_perplexity"] > 1
    assert all(line["answer_perplexity"] > 1 for line in _lines(tmp_path / "lab"))
    assert run.best.loss == min(record.loss for record in run.records)
    assert run.best.loss == pytest.approx(math.log(run.best.perplexity) + math.log(run.best.answer_perplexity))

    prompts.write_text('{"prompt": "a model merges"}\n')
    with pytest.raises(SettingsError, match='Line 1 .* has no "prompt" and "answer" strings'):
        run_lab(LabSettings(recipe, planted.mixed_text, trials=1, out=tmp_path / "other", prompts=prompts))
