"""What a lab run keeps in its folder: `trials.jsonl` (one line per finished trial, appended and flushed as each
ends, so a cancelled or crashed run keeps every trial it finished), `best.yml` (the best recipe so far, a plain
recipe for `mergesmith merge` and mergekit) and `lab.json` (what the search is: recipe, text, tuned numbers, seed),
which a second run in the same folder must match to continue it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guiapp.errors import OutputError, SettingsError
from guiapp.facts.wording import say
from guiapp.merging.recipe import recipe_yaml

TRIALS_FILE = "trials.jsonl"
BEST_FILE = "best.yml"
SEARCH_FILE = "lab.json"


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial: its number (0 is the recipe as given), the values tried (and their place in the
    optimizer's unit box), the perplexity (None when the trial failed, with `error` saying why), with prompts
    the perplexity of the expected answers, and its time."""

    index: int
    values: dict[str, float]
    unit: list[float]
    perplexity: float | None
    seconds: float
    error: str | None = None
    answer_perplexity: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.perplexity is not None and math.isfinite(self.perplexity)

    @property
    def loss(self) -> float:
        """What the search lowers: the log-perplexity on the text, plus that of the answers when there are
        prompts (infinite for a failed trial)."""
        if not self.succeeded:
            return math.inf
        return math.log(self.perplexity) + (math.log(self.answer_perplexity) if self.answer_perplexity else 0.0)

    def as_json(self) -> dict[str, Any]:
        return {"trial": self.index, "values": self.values, "unit": self.unit, "perplexity": self.perplexity,
                "seconds": round(self.seconds, 3), "status": "done" if self.succeeded else "failed",
                **({"answer_perplexity": self.answer_perplexity} if self.answer_perplexity is not None else {}),
                **({"error": self.error} if self.error else {})}


class TrialStore:
    """The trials of one search in `folder`. Opening checks that the folder holds this search or none.

    Raises OutputError when the folder cannot be made or written, SettingsError when it holds another search.
    """

    def __init__(self, folder: Path, search: dict[str, Any]) -> None:
        self.folder = folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OutputError(f"The lab cannot make its folder {folder}: {error.strerror or error}.",
                              hint=say("Choose a folder you can write to{cli_only: with {output}}.")) from None
        described = folder / SEARCH_FILE
        if described.is_file():
            try:
                kept = json.loads(described.read_text())
            except (OSError, ValueError):
                kept = None
            if kept != search:
                raise SettingsError(
                    f"{folder} holds another lab search (a different recipe, text, numbers to tune or seed).",
                    why="Running again in the same folder continues its search; the trials there were made for "
                    "another question.", hint=say("{cli_only:Give {output}}{window_only:Choose} a new folder, or run with the same settings to "
                    "continue."),
                    key="out")
        elif any(folder.iterdir()):
            raise SettingsError(f"{folder} is not empty and holds no lab search.",
                                hint=say("{cli_only:Give {output}}{window_only:Choose} a new or empty folder."), key="out")
        else:
            self._write_whole(described, json.dumps(search, indent=2) + "\n")
        self.records: dict[int, TrialRecord] = {}
        trials = folder / TRIALS_FILE
        if trials.is_file():
            for line in trials.read_text().splitlines():
                record = _record(line)
                if record is not None:  # a line cut short by a crash is the trial that did not finish
                    self.records[record.index] = record

    def append(self, record: TrialRecord) -> None:
        """Keep `record`: one line added to trials.jsonl and flushed to disk before this returns."""
        self.records[record.index] = record
        try:
            with open(self.folder / TRIALS_FILE, "a") as stream:
                stream.write(json.dumps(record.as_json()) + "\n")
                stream.flush()
                os.fsync(stream.fileno())
        except OSError as error:
            raise OutputError(f"The lab cannot write {self.folder / TRIALS_FILE}: {error.strerror or error}.",
                              hint="Check that the disk has room and the folder is writable.") from None

    def best(self, up_to: int | None = None) -> TrialRecord | None:
        """The successful trial with the lowest loss (the earliest of equals), among the first `up_to` after the
        start when given, or None."""
        done = [r for r in self.records.values() if r.succeeded and (up_to is None or r.index <= up_to)]
        return min(done, key=lambda r: (r.loss, r.index)) if done else None

    def write_best(self, document: dict[str, Any]) -> Path:
        """Write `document` as best.yml (replacing the one before it whole, never half-written)."""
        path = self.folder / BEST_FILE
        self._write_whole(path, recipe_yaml(document))
        return path

    def _write_whole(self, path: Path, text: str) -> None:
        staging = path.with_name(path.name + ".partial")
        try:
            staging.write_text(text)
            os.replace(staging, path)
        except OSError as error:
            raise OutputError(f"The lab cannot write {path}: {error.strerror or error}.",
                              hint="Check that the disk has room and the folder is writable.") from None


def _record(line: str) -> TrialRecord | None:
    try:
        data = json.loads(line)
        return TrialRecord(int(data["trial"]), {str(k): float(v) for k, v in data["values"].items()},
                           [float(u) for u in data["unit"]],
                           None if data["perplexity"] is None else float(data["perplexity"]),
                           float(data["seconds"]), data.get("error"),
                           None if data.get("answer_perplexity") is None else float(data["answer_perplexity"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
