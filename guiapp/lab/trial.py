"""One trial: a candidate recipe merged in memory, straight into a model that is built once, and scored on the
user's text exactly as `mergesmith perplexity` scores it.

The inputs are opened once and what the merge loop reads of them is kept in memory within a budget
(guiapp.lab.kept): each trial runs the merge loop of `mergesmith merge` (the same plan, arithmetic, seed and casts)
on the kept tensors, with every result handed to the model's own parameters instead of a shard file, then the
perplexity of `guiapp.inference.running` (its windows). Nothing of the model is written to disk, and memory holds
one model, the kept inputs and the merge loop's few blocks, however many trials run.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.sources import open_readers
from guiapp.compute.devices import resolve_device
from guiapp.errors import (
    CheckpointError,
    IncompatibleModelsError,
    NonFiniteResultError,
    RecipeError,
    SettingsError,
)
from guiapp.facts.wording import say
from guiapp.hub.references import ModelRef
from guiapp.inference.running import LoadedModel, ModelSource, load_architecture, perplexity
from guiapp.lab.kept import KeptReaders, default_budget
from guiapp.merging.merge import MergeSettings, merge_into, plan_merge, tokenizer_folder
from guiapp.merging.model_card import write_merge_metadata
from guiapp.merging.plan import align_vocabulary
from guiapp.merging.recipe import recipe_from_dict
from guiapp.progress import Progress
from guiapp.system.bounded import read_text_limited

# Below this many tokens two merges' perplexities differ by chance more than by merit.
MIN_TOKENS = 32
PROMPTS_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class PromptPair:
    """A prompt and the answer the user expects to it."""

    prompt: str
    answer: str


@dataclass(frozen=True)
class Material:
    """What a trial is scored on: the text, and the prompt/answer pairs when the user gives some."""

    text: str
    pairs: tuple[PromptPair, ...] = ()


@dataclass(frozen=True)
class TrialScore:
    """A trial's perplexity on the tuned text and, with prompts, of the expected answers given their prompts
    (None when the trial failed, `error` saying why), and its time."""

    perplexity: float | None
    seconds: float
    error: str | None = None
    answer_perplexity: float | None = None


def read_prompt_pairs(path: Path) -> tuple[PromptPair, ...]:
    """The pairs of a .jsonl file, one `{"prompt": ..., "answer": ...}` object a line (blank lines skipped).

    Raises SettingsError for a file that cannot be read, a line that is not such an object, or no pair at all.
    """
    pairs = []
    hint = 'Write one JSON object a line: {"prompt": "What is 2+2?", "answer": "4"}.'
    for number, line in enumerate(read_text_limited(path, PROMPTS_BYTES, SettingsError, what="prompts file")
                                  .splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise SettingsError(f"Line {number} of {path} is not JSON: {error.msg}.", hint=hint, key="prompts") from None
        if not (isinstance(record, dict) and isinstance(record.get("prompt"), str)
                and isinstance(record.get("answer"), str) and record["answer"].strip()):
            raise SettingsError(f"Line {number} of {path} has no \"prompt\" and \"answer\" strings.", hint=hint,
                                key="prompts")
        pairs.append(PromptPair(record["prompt"], record["answer"]))
    if not pairs:
        raise SettingsError(f"{path} holds no prompt and answer.", hint=hint, key="prompts")
    return tuple(pairs)


def answer_perplexity(loaded: LoadedModel, pairs: tuple[PromptPair, ...], progress: Progress) -> float:
    """exp(mean negative log-likelihood) of each answer's tokens following its prompt (the prompt's own tokens are
    not scored), in float32; the start of a prompt is cut where prompt and answer exceed the model's context."""
    total, count = 0.0, 0
    limit = loaded.max_positions
    for pair in pairs:
        prompt = loaded.tokenizer(pair.prompt)["input_ids"]
        answer = loaded.tokenizer(pair.answer, add_special_tokens=False)["input_ids"]
        if not answer:
            continue
        ids = (prompt + answer)[-limit:] if limit else prompt + answer
        chunk = torch.tensor(ids, device=loaded.device)
        with torch.inference_mode():
            logits = loaded.model(input_ids=chunk[None]).logits[0, :-1].float()
        scored = min(len(answer), len(ids) - 1)
        log_probs = torch.log_softmax(logits[-scored:], dim=-1)
        total -= log_probs.gather(1, chunk[-scored:, None]).sum().item()
        count += scored
        progress.check_cancelled()
    if not count:
        raise SettingsError("The answers in the prompts file make no tokens for this model's tokenizer.",
                            hint="Write answers of at least one word.", key="prompts")
    return math.exp(total / count)


def check_token_count(tokens: int, what: str, window: int) -> None:
    """Raise SettingsError when a text of `tokens` tokens is too short to tell merges apart (under MIN_TOKENS)."""
    if tokens < MIN_TOKENS:
        raise SettingsError(
            f"The {what} is too short for the lab: {tokens} tokens, and it needs at least {MIN_TOKENS} "
            f"(one evaluation window holds up to {window}).",
            why="On a few words, merges differ in perplexity by chance more than by how well they fit your text.",
            hint="Give a text of a few paragraphs or more.", key="text")


class Evaluator:
    """Merges candidate recipes of one recipe's shape into one model in memory and scores them.

    Building one opens the inputs and makes the model from the merged configuration (random weights until the
    first trial). The inputs' tensors are kept in memory up to `keep_bytes` (None: `default_budget` for the
    model's size, 0: read from disk at every trial). Raises what planning a merge raises (RecipeError, CheckpointError, HubError...) and
    UnsupportedModelError for models that do not generate text.
    """

    def __init__(self, document: dict[str, Any], device: str = "cpu", window: int = 512, seed: int = 0,
                 progress: Progress | None = None, keep_bytes: int | None = None) -> None:
        progress = progress or Progress()
        recipe = recipe_from_dict(document)
        if recipe.modules:
            raise RecipeError("The lab tunes recipes of one module; this one merges several.",
                              hint="Tune each module's recipe on its own.", key="modules")
        plan = plan_merge(recipe, progress)
        self._device = resolve_device(device)
        self._window = window
        self._settings = MergeSettings(output=Path("."), device=device, seed=seed)
        self._shapes = {task.name: task.shape for task in plan.tasks}
        self._inputs = KeptReaders(open_readers([model.ref for model in plan.models], progress),
                                   default_budget(plan.output_bytes) if keep_bytes is None else keep_bytes)
        self._folder = Path(tempfile.mkdtemp(prefix="mergesmith-lab-"))
        try:
            self._donor = tokenizer_folder(plan.tokenizer_donor)
            align_vocabulary(plan, self._folders, self._donor)
            write_merge_metadata(self._folder, plan, self._folders, self._donor)
            self.loaded = load_architecture(ModelSource(ModelRef.parse(str(self._folder)), self._folder),
                                            plan.out_dtype, device)
            self._parameters = self.loaded.model.state_dict()
            self._weights = {name for name, _ in self.loaded.model.named_parameters()}
        except BaseException:
            self.close()
            raise

    @property
    def _folders(self) -> list[Path]:
        return [reader.folder for reader in self._inputs.readers]

    def load(self, document: dict[str, Any], progress: Progress | None = None) -> None:
        """Merge `document` (this recipe with other numbers) into the model. Raises RecipeError for values the
        method refuses, NonFiniteResultError, JobCancelled."""
        progress = progress or Progress()
        plan = plan_merge(recipe_from_dict(document), progress)
        if {task.name: task.shape for task in plan.tasks} != self._shapes:
            raise RecipeError("A candidate recipe makes a model of another shape than the recipe as given.",
                              hint="Tune numbers only; layer ranges and models stay as the recipe has them.")
        align_vocabulary(plan, self._folders, self._donor)
        sink = _ModelSink(self._parameters, self._weights)
        merge_into(plan, self._inputs.readers, sink, self._device, self._settings, progress)

    def score(self, document: dict[str, Any], material: Material, progress: Progress | None = None) -> TrialScore:
        """The perplexity on `material` of the merge of `document`. A trial that cannot be scored (the method refuses
        the values, the result is NaN, memory runs out) is returned with its error, not raised; JobCancelled is
        raised."""
        started = time.perf_counter()
        try:
            self.load(document, progress)
            value = perplexity(self.loaded, material.text, self._window, progress).perplexity
            answers = answer_perplexity(self.loaded, material.pairs, progress or Progress()) if material.pairs else None
        except (RecipeError, NonFiniteResultError, IncompatibleModelsError) as error:
            return TrialScore(None, time.perf_counter() - started, str(error))
        except (torch.OutOfMemoryError, MemoryError):
            return TrialScore(None, time.perf_counter() - started, "The merge ran out of memory.")
        seconds = time.perf_counter() - started
        if not all(math.isfinite(v) for v in (value, answers or 0.0)):
            return TrialScore(None, seconds, f"The merged model's perplexity came out as {value}: its predictions "
                              "are broken (NaN or infinite) with these values.")
        return TrialScore(value, seconds, answer_perplexity=answers)

    def token_count(self, text: str) -> int:
        """How many tokens the model's tokenizer makes of `text`."""
        return len(self.loaded.tokenizer(text)["input_ids"])

    def check_text(self, text: str, what: str) -> None:
        """Raise SettingsError when `text` is too short to tell merges apart (fewer than MIN_TOKENS tokens)."""
        check_token_count(self.token_count(text), what, self._window)

    def close(self) -> None:
        """Let go of the kept inputs, close them and remove the model's configuration folder (nothing else was
        written)."""
        if hasattr(self, "_inputs"):
            self._inputs.close()
        shutil.rmtree(self._folder, ignore_errors=True)


class _ModelSink:
    """The merge loop's output written into a model's parameters (rows of a tensor as they come)."""

    def __init__(self, parameters: dict[str, torch.Tensor], weights: set[str]) -> None:
        self._parameters = parameters
        self._weights = weights  # the model's parameters (not its buffers), each tied group once
        self._written: set[int] = set()

    def write(self, name: str, tensor: torch.Tensor, row_start: int = 0) -> None:
        """Copy `tensor` into the parameter `name` from row `row_start`. Raises CheckpointError for a tensor the
        model does not have under that name."""
        target = self._parameters.get(name)
        if target is None:
            raise CheckpointError(
                f"The merged tensor {name} has no place in the model transformers builds from the configuration.",
                why="The lab puts merged tensors straight into the model, by the names transformers gives them; "
                "these models' files name their tensors otherwise.",
                hint=say("{merge_and_compare} instead."))
        rows = tensor.shape[0] if tensor.dim() else 0
        destination = target[row_start:row_start + rows] if rows and tensor.shape != target.shape else target
        destination.copy_(tensor)
        self._written.add(target.untyped_storage().data_ptr())

    def close(self) -> None:
        """Raise CheckpointError when a weight of the model got nothing from the merge (it would keep random
        values and the perplexity would mean nothing)."""
        missing = [name for name, tensor in self._parameters.items()
                   if name in self._weights and tensor.untyped_storage().data_ptr() not in self._written]
        if missing:
            raise CheckpointError(
                f"The merge gives no value to {len(missing)} of the model's weights (such as {missing[0]}).",
                why="The lab puts merged tensors straight into the model, by the names transformers gives them.",
                hint=say("{merge_and_compare} instead."))

    def abort(self) -> None:
        """Nothing to undo: the next trial overwrites every weight."""


