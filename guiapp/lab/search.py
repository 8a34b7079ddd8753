"""The lab's search: CMA-ES (the `cma` library) over the tunable numbers, each scaled to [0, 1] of its range, to
lower the log-perplexity of the merged model on the user's text.

Why CMA-ES from `cma`: the question is a small continuous box (a few weights, densities, t's) with a costly,
deterministic objective and budgets of tens of trials, which is what CMA-ES is made for; `cma` is the reference
implementation by its author, maintained, pure Python over NumPy (no database or web stack), takes bounds and a
seed, and asks for candidates in generations that the Ray engine runs side by side. Given the same seed and the
same results, it asks for the same candidates: a run that continues replays the recorded results through it and
so goes on exactly where it stopped, with no optimizer state kept on disk (no pickle).

The optimizer stays in this process; the engine (local or Ray) only merges and scores candidates.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guiapp.errors import SettingsError
from guiapp.facts.wording import say
from guiapp.inference.running import read_text_file, readable_text
from guiapp.lab.engines import Engine, open_engine
from guiapp.lab.space import Tunable, tunables, with_values
from guiapp.lab.store import TrialRecord, TrialStore
from guiapp.lab.trial import Material, PromptPair, read_prompt_pairs
from guiapp.merging.recipe import load_recipe
from guiapp.progress import Progress

# The first generation's spread, in units of each range: wide enough to leave the start, narrow enough to keep near it.
SIGMA0 = 0.25


@dataclass(frozen=True)
class LabSettings:
    """One search: the recipe file, the text, how many trials after the start, where to keep them, and how."""

    recipe: Path
    text: Path
    trials: int
    out: Path
    seed: int = 0
    engine: str = "local"
    ray_address: str | None = None
    holdout: float = 0.0
    tune: str | None = None
    window: int = 512
    device: str = "cpu"
    prompts: Path | None = None


@dataclass
class LabRun:
    """What a search found: the start, every trial, the best, and (with a holdout) both on the held-out text."""

    tunables: list[Tunable]
    records: list[TrialRecord]
    start: TrialRecord
    best: TrialRecord
    best_recipe: Path
    engine: str
    held_out: dict[str, float | None] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        done = [r for r in self.records if r.index > 0]
        return {
            "best_perplexity": self.best.perplexity, "start_perplexity": self.start.perplexity,
            "best_values": self.best.values, "start_values": self.start.values, "best_trial": self.best.index,
            "trials": len(done), "failed_trials": sum(not r.succeeded for r in done), "engine": self.engine,
            "best_recipe": str(self.best_recipe),
            **({"best_answer_perplexity": self.best.answer_perplexity,
                "start_answer_perplexity": self.start.answer_perplexity}
               if self.start.answer_perplexity is not None else {}),
            "tuned": {t.name: [t.low, t.high] for t in self.tunables},
            **({"held_out_best_perplexity": self.held_out.get("best"),
                "held_out_start_perplexity": self.held_out.get("start")} if self.held_out else {}),
        }


def run_lab(settings: LabSettings, progress: Progress | None = None,
            on_trial: Callable[[TrialRecord], None] | None = None) -> LabRun:
    """Search `settings.recipe`'s numbers for the lowest perplexity on `settings.text`; `on_trial` hears each
    trial as it is recorded (the start first).

    Trials already in `settings.out` are not run again. Raises SettingsError / RecipeError for bad input (a
    recipe with nothing to tune, a text too short, a folder holding another search), the engine's errors (Ray
    unreachable), JobCancelled (every finished trial stays in trials.jsonl, best.yml is the best so far).
    """
    progress = progress or Progress()
    if settings.trials < 1:
        raise SettingsError("The lab needs at least one trial.", hint="Ask for 20 trials or more.", key="trials")
    if not 0 <= settings.holdout < 0.9:
        raise SettingsError(f"The held-out share must be at least 0 and below 0.9 (got {settings.holdout}).",
                            hint="Keep 0.2 of the text aside to see whether the search overfits.", key="holdout")
    document = load_recipe(settings.recipe).document
    chosen = tunables(document, settings.tune)
    text, note = readable_text(read_text_file(settings.text), "text")
    if note:
        progress.log(note)
    pairs = read_prompt_pairs(settings.prompts) if settings.prompts else ()
    tuned_text, held_text = split_text(text, settings.holdout)
    tuned = Material(tuned_text, pairs)
    store = TrialStore(settings.out, _search_identity(document, text, pairs, chosen, settings))
    with open_engine(settings.engine, settings.ray_address, document, settings.device, settings.window,
                     settings.seed, progress) as engine:
        engine.check_text(tuned_text, "text" if not held_text else "tuned part of the text")
        if held_text:
            engine.check_text(held_text, "held-out part of the text")
        start_values = {t.name: t.start for t in chosen}
        if 0 not in store.records:
            progress.start_stage("Scoring the recipe as given", total=1)
            _run_batch(engine, store, document, chosen, [(0, start_values, [t.to_unit(t.start) for t in chosen])],
                       tuned, progress, on_trial)
        elif on_trial:
            on_trial(store.records[0])
        start = store.records[0]
        if not start.succeeded:
            raise SettingsError(f"The recipe as given cannot be scored: {start.error}",
                                hint=say("Fix the recipe so that {merge_and_perplexity} work on it, then start the lab "
                                         "again in a new folder."), key="recipe")
        _search(engine, store, document, chosen, settings, tuned, progress, on_trial)
        best = store.best(up_to=settings.trials)  # a folder may hold more trials than this run asks for
        best_path = store.write_best(with_values(document, chosen, best.values))
        held_out = {}
        if held_text:
            progress.start_stage("Scoring on the held-out text", total=2)
            scores = engine.score_all([(0, with_values(document, chosen, start.values)),
                                       (1, with_values(document, chosen, best.values))], Material(held_text))
            held_out = {"start": scores[0].perplexity, "best": scores[1].perplexity}
    progress.log(f"Best perplexity {best.perplexity:.4f} (trial {best.index}); the recipe as given: "
                 f"{start.perplexity:.4f}. Recipe: {best_path}")
    records = sorted((r for r in store.records.values() if r.index <= settings.trials), key=lambda r: r.index)
    return LabRun(chosen, records, start, best, best_path,
                  engine.name, held_out)


def split_text(text: str, holdout: float) -> tuple[str, str | None]:
    """The text to tune on and the held-out end of it (`holdout` of its characters, cut at a line end when one is
    near, None without a holdout)."""
    if holdout <= 0:
        return text, None
    cut = int(len(text) * (1 - holdout))
    line_end = text.rfind("\n", 0, cut)
    if line_end > cut * 0.8:
        cut = line_end + 1
    return text[:cut], text[cut:]


def _search(engine: Engine, store: TrialStore, document: dict[str, Any], chosen: list[Tunable],
            settings: LabSettings, material: Material, progress: Progress,
            on_trial: Callable[[TrialRecord], None] | None) -> None:
    with warnings.catch_warnings():  # cma warns on import that matplotlib (its plots) is missing
        warnings.simplefilter("ignore")
        import cma  # noqa: PLC0415 - loaded with the search, after the recipe and the text have been checked

    start_unit = [t.to_unit(t.start) for t in chosen]
    strategy = cma.CMAEvolutionStrategy(start_unit, SIGMA0, {"bounds": [0, 1], "seed": settings.seed + 1,
                                                               "verbose": -9})
    progress.start_stage("Searching", total=settings.trials)
    progress.skip("trials already done", units=sum(1 for i in store.records if 0 < i <= settings.trials))
    index = 1
    while index <= settings.trials:
        candidates = strategy.ask()
        batch = candidates[: settings.trials - index + 1]
        wanted = []
        for offset, unit in enumerate(batch):
            record = store.records.get(index + offset)
            if record is None or not _same_point(record.unit, unit):
                wanted.append((index + offset, {t.name: t.from_unit(u) for t, u in zip(chosen, unit)},
                               [float(u) for u in unit]))
            elif on_trial:
                on_trial(record)
        _run_batch(engine, store, document, chosen, wanted, material, progress, on_trial)
        if len(batch) == len(candidates):
            strategy.tell(candidates, [_objective(store, index + k) for k in range(len(batch))])
        index += len(batch)


def _run_batch(engine: Engine, store: TrialStore, document: dict[str, Any], chosen: list[Tunable],
               wanted: list[tuple[int, dict[str, float], list[float]]], material: Material, progress: Progress,
               on_trial: Callable[[TrialRecord], None] | None) -> None:
    """Run the trials `wanted` (number, values, the optimizer's point) on the engine, recording each as it
    finishes."""
    points = {index: (values, unit) for index, values, unit in wanted}
    requests = [(index, with_values(document, chosen, values)) for index, values, _ in wanted]
    for index, score in engine.score_each(requests, material):
        values, unit = points[index]
        record = TrialRecord(index, values, unit, score.perplexity, score.seconds, score.error,
                             score.answer_perplexity)
        store.append(record)
        best = store.best()
        if best is not None:
            store.write_best(with_values(document, chosen, best.values))
        if on_trial:
            on_trial(record)
        outcome = f"perplexity {score.perplexity:.4f}" if record.succeeded else f"failed: {score.error}"
        progress.log(f"Trial {index}: {outcome} ({score.seconds:.1f} s)")
        progress.step(f"trial {index}")


def _objective(store: TrialStore, index: int) -> float:
    """The loss of trial `index` (TrialRecord.loss); a failed trial counts as worse than every trial that worked
    (one more than the worst loss so far), so the search moves away from it."""
    record = store.records[index]
    if record.succeeded:
        return record.loss
    return max(r.loss for r in store.records.values() if r.succeeded) + 1.0


def _same_point(recorded: list[float], asked: Any) -> bool:
    return len(recorded) == len(asked) and all(abs(a - b) < 1e-6 for a, b in zip(recorded, asked))


def _search_identity(document: dict[str, Any], text: str, pairs: tuple[PromptPair, ...], chosen: list[Tunable],
                     settings: LabSettings) -> dict:
    """What makes two runs the same search (kept in lab.json): recipe, text, prompts, tuned numbers and ranges,
    seed."""
    return {
        "recipe": document, "text_sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
        "prompts_sha256": hashlib.sha256(json.dumps([[p.prompt, p.answer] for p in pairs]).encode()).hexdigest(),
        "tuned": {t.name: [t.low, t.high] for t in chosen}, "seed": settings.seed,
        "holdout": settings.holdout, "window": settings.window,
    }
