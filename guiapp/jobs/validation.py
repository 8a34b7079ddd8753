"""Checks made before a job runs, as structured results the window and the CLI only render.

Each check reads metadata only (safetensors headers, adapter configs, the output folder) and never raises: what
is wrong comes back as `Problem`s, each with its severity, the user-facing message and hint, and the key it
concerns (a recipe key path such as ("models", 1, "parameters", "weight"), or a setting name such as ("output",)),
together with the compatibility verdict and the estimate when the job can run. They block on disk and network
reads, so the window calls them off its own thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from guiapp.errors import KeyPath, key_path
from guiapp.facts.dtypes import BY_NAME, WRITABLE
from guiapp.facts.wording import join
from guiapp.system.paths import expanded, home_dir


class Severity(Enum):
    ERROR = "error"  # the job cannot run as set up
    WARNING = "warning"  # it can run, but the user should know


@dataclass(frozen=True)
class Problem:
    """One thing a check found: what (message), what to do (hint), and where (key; empty for the job as a whole).

    `error` is the exception it came from, when there is one, for a full explanation (`guiapp.system.explain`).
    """

    severity: Severity
    message: str
    key: KeyPath = ()
    hint: str | None = None
    error: BaseException | None = None

    @property
    def text(self) -> str:
        """The message and hint as one line of text (for both audiences: `guiapp.facts.wording`)."""
        return join(self.message, self.hint)


def problem_from(error: BaseException, default_key: str | KeyPath = ()) -> Problem:
    """The error as a Problem: its own key when it carries one, else `default_key`."""
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    key = getattr(error, "key", None) or key_path(default_key)
    return Problem(Severity.ERROR, message, key, getattr(error, "hint", None), error)


def output_problems(destination: Path, inputs: tuple[Path, ...], replace: bool) -> list[Problem]:
    """The output rule (`guiapp.checkpoints.output_guard.check_output_location`) for a job reading `inputs`: [] when it
    may write at `destination`, else the refusal. A taken folder's error carries the free name to offer
    (its `remedy`); the job would stop at once there, so it blocks the run like any other error."""
    from guiapp.checkpoints.output_guard import check_output_location  # noqa: PLC0415 - loaded by the checks' callers

    try:
        check_output_location(destination, inputs, replace=replace)
    except Exception as error:
        return [problem_from(error, "output")]
    return []


def free_output(error: BaseException | None, chosen: str = "") -> tuple[str, str] | None:
    """The free folder an output folder's error offers instead of the `chosen` one and the label of the button
    that takes it (None: it offers none): a new name beside a taken folder, or a folder beside the models when the
    chosen one is inside an input."""
    remedy = getattr(error, "remedy", None)
    if remedy is None or remedy.setting != "output" or not remedy.value:
        return None
    folder = str(remedy.value)
    free = Path(folder)
    if chosen and free.parent != expanded(chosen).parent:
        return folder, f"Use {free.parent.name}/{free.name}, beside the models"
    return folder, f"Use a new name: {free.name}"


@dataclass
class CheckResult:
    """What a check found. `compatible` is the verdict on the models: True, False, or None when it could not be
    reached (the recipe or settings are invalid before any model is compared)."""

    problems: list[Problem] = field(default_factory=list)
    compatible: bool | None = None
    fit: Any = None  # guiapp.system.resources.Fit, when the machine could be examined
    time: Any = None  # guiapp.system.resources.TimeEstimate, when this machine's speed is known

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.WARNING]

    @property
    def ready(self) -> bool:
        """The job can run as set up."""
        return not self.errors and self.compatible is not False


@dataclass
class MergeCheck(CheckResult):
    """A merge recipe checked: the plan's size besides the problems."""

    tensors: int = 0
    models: int = 0
    output_bytes: int = 0
    input_bytes: int = 0
    layers: int = 0  # the merged model's number of layers (0: it has none numbered), for the gradient pictures
    # The output's size in bytes per output dtype (None: the dtype the recipe stores in without one).
    output_sizes: dict[str | None, int] = field(default_factory=dict)


@dataclass
class PairCheck(CheckResult):
    """A base and a fine-tune (extraction), or a base and an adapter (apply), checked from their headers."""

    matrices: int = 0
    read_bytes: int = 0


def check_merge(document: dict[str, Any], device: str, output: str, probe: Any, replace: bool = False) -> MergeCheck:
    """Check the recipe `document` from the models' headers, the output folder by the output rule (`replace`: the
    user allows replacing an earlier Mergesmith output there), and estimate the job. Never raises."""
    from guiapp.checkpoints.tensor_roles import split_layer_name
    from guiapp.errors import RecipeError
    from guiapp.jobs.estimates import estimate_merge
    from guiapp.merging.merge import merge_inputs, plan_merge  # loads torch: only when checking
    from guiapp.merging.recipe import recipe_from_dict

    result = MergeCheck()
    destination = expanded(output) if output else None
    if destination is None:
        result.problems.append(Problem(Severity.ERROR, "Choose an output folder.", ("output",)))
    try:
        recipe = recipe_from_dict(document)
        plan = plan_merge(recipe)
    except RecipeError as error:
        result.problems.append(problem_from(error, "models"))
        return result
    except Exception as error:  # incompatible or unreadable models, Hub errors: they concern the models
        result.problems.append(problem_from(error, "models"))
        result.compatible = False
        return result
    result.compatible = True
    result.tensors, result.models = len(plan.tasks), len(plan.models)
    result.output_bytes, result.input_bytes = plan.output_bytes, plan.input_bytes
    result.output_sizes = _output_sizes(plan, document.get("out_dtype"))
    result.layers = len({place.index for task in plan.tasks if (place := split_layer_name(task.name)) is not None})
    result.problems.extend(Problem(Severity.WARNING, text, ("models",)) for text in plan.warnings)
    result.problems.extend(unusual_values(document, plan.method))
    if destination is not None:
        result.problems.extend(output_problems(destination, merge_inputs(recipe), replace))
    try:
        estimate = estimate_merge(plan, device, destination or home_dir(), probe)
    except Exception:  # the output drive or GPU cannot be examined: the job says so when it starts
        return result
    result.fit, result.time = estimate.fit, estimate.time
    return result


# A number further from zero than this many times its usual value (at least 1) is far outside its usual range.
UNUSUAL_FACTOR = 10


def unusual_values(document: dict[str, Any], method: Any) -> list[Problem]:
    """Warnings, in the window's words, for the recipe's numbers that the method allows but that lie far outside
    their usual range (a λ of 50 where 1 is usual): allowed, so the merge may run, but likely a slip. A parameter
    whose schema bounds it on both sides is left to the range check."""
    from guiapp.jobs.naming import input_name
    from guiapp.jobs.plain_words import parameter_label
    from guiapp.jobs.recipe_fixes import suggested_value

    scopes: list[tuple[KeyPath, Any, str]] = [((), document.get("parameters"), "")]
    for index, entry in enumerate(document.get("models") or []):
        if isinstance(entry, dict):
            scopes.append((("models", index), entry.get("parameters"), f" for {input_name(str(entry.get('model')))}"))
    problems = []
    for key, parameters, whose in scopes:
        for name, value in (parameters if isinstance(parameters, dict) else {}).items():
            spec = method.param(name)
            if spec is None or spec.kind not in ("float", "int") or None not in (spec.minimum, spec.maximum):
                continue
            numbers = [v for v in (value if isinstance(value, list) else [value])
                       if isinstance(v, (int, float)) and not isinstance(v, bool)]
            usual = max(1.0, abs(suggested_value(spec)))
            far = [v for v in numbers if abs(v) > UNUSUAL_FACTOR * usual]
            if far:
                problems.append(Problem(
                    Severity.WARNING,
                    f"“{parameter_label(spec)}”{whose} is {far[0]:g}, far from its usual value ({usual:g}): check "
                    "that it is what you meant.", (*key, "parameters", name)))
    return problems


def check_pair(base: str, model: str, device: str, output: str, probe: Any, replace: bool = False, *,
               rank_mode: str = "fixed", rank_value: float = 32, max_rank: int | None = None,
               solver: str = "randomized", embeddings: str = "save") -> PairCheck:
    """Whether `model` is a fine-tune of `base` (the one compatibility check, from their headers), whether the
    adapter may be written at `output` (`replace`: the user allows replacing an earlier output there) and what
    extracting it costs with the rank rule (`rank_mode`, `rank_value`, `max_rank`, as the extract job takes
    them), `solver` and `embeddings`. Never raises."""
    from guiapp.checkpoints.sources import read_headers
    from guiapp.checkpoints.writing import local_input_folders
    from guiapp.hub.references import ModelRef
    from guiapp.jobs.estimates import estimate_extraction
    from guiapp.lora.extract import pair_problem  # loads torch: only when checking
    from guiapp.lora.lowrank import RankRule

    try:
        base_ref = ModelRef.parse(base)
        base_headers = read_headers(base_ref)
    except Exception as error:  # unreadable, missing or not a model: said next to the base
        return PairCheck(problems=[problem_from(error, "base")])
    try:
        model_ref = ModelRef.parse(model)
        model_headers = read_headers(model_ref)
    except Exception as error:
        return PairCheck(problems=[problem_from(error, "model")])
    problem = pair_problem(base_headers, model_headers, str(base_ref), str(model_ref))
    if problem is not None:
        return PairCheck(problems=[Problem(Severity.ERROR, problem.message, ("model",))], compatible=False)
    check = PairCheck(compatible=True, matrices=sum(len(t.shape) == 2 for t in model_headers.tensors.values()),
                      read_bytes=sum(t.nbytes for t in model_headers.tensors.values())
                      + sum(t.nbytes for t in base_headers.tensors.values()))
    if output:
        check.problems.extend(output_problems(expanded(output), local_input_folders((base_ref, model_ref)), replace))
    try:
        rule = RankRule(rank_mode, rank_value, max_rank)
        rank = rule.cap((1 << 30, 1 << 30)) if rule.mode == "fixed" else 32
        estimate = estimate_extraction(base_headers, model_headers, device, expanded(output), probe, rank=rank,
                                       solver=solver, embeddings=embeddings, rule=rule)
    except Exception:  # an output drive that cannot be examined is reported when the job starts
        return check
    check.fit, check.time = estimate.fit, estimate.time
    return check


def check_adapter(base: str, adapter: str, device: str, output: str, replace: bool = False,
                  probe: Any = None) -> PairCheck:
    """Whether the adapter in folder `adapter` fits `base`'s tensors, whether the model may be written at `output`
    (`replace` as for check_pair) and what applying it costs (its time from `probe` or earlier applications).
    Never raises."""
    from guiapp.checkpoints.adapters import apply_inputs, open_adapter  # loads torch: only when checking
    from guiapp.checkpoints.sources import read_headers
    from guiapp.errors import IncompatibleModelsError
    from guiapp.hub.references import ModelRef
    from guiapp.jobs.estimates import estimate_apply

    try:
        base_ref = ModelRef.parse(base)
        headers = read_headers(base_ref)
    except Exception as error:  # unreadable, missing or not a model: said next to the base
        return PairCheck(problems=[problem_from(error, "base")])
    try:
        lora = open_adapter(ModelRef.parse(adapter))
        lora.check_base(headers.tensors, base)
    except IncompatibleModelsError as error:
        return PairCheck(problems=[problem_from(error, "adapter")], compatible=False)
    except Exception as error:
        return PairCheck(problems=[problem_from(error, "adapter")])
    check = PairCheck(compatible=True, matrices=len(lora.modules) + len(lora.replacements),
                      read_bytes=sum(t.nbytes for t in headers.tensors.values()))
    if output:
        check.problems.extend(output_problems(expanded(output), apply_inputs(base_ref, lora), replace))
    try:
        estimate = estimate_apply(headers, device, expanded(output), probe)
    except Exception:  # an output drive that cannot be examined is reported when the job starts
        return check
    check.fit, check.time = estimate.fit, estimate.time
    return check


def check_adapters(adapters: list[str], output: str, replace: bool = False) -> PairCheck:
    """Whether every folder or Hub id in `adapters` is a LoRA adapter Mergesmith reads (the first problem keyed
    "adapters"), and whether a new adapter may be written at `output` (`replace` as for check_pair): the check before
    resizing one adapter or combining several. Never raises."""
    from guiapp.checkpoints.adapters import open_adapter  # loads torch: only when checking
    from guiapp.hub.references import ModelRef

    opened = []
    for reference in adapters:
        try:
            opened.append(open_adapter(ModelRef.parse(reference)))
        except Exception as error:
            return PairCheck(problems=[problem_from(error, "adapters")])
    check = PairCheck(compatible=True, matrices=sum(len(lora.modules) for lora in opened))
    if output:
        check.problems.extend(output_problems(expanded(output), tuple(lora.folder for lora in opened), replace))
    return check


def _output_sizes(plan: Any, out_dtype: str | None) -> dict[str | None, int]:
    """The output's size in bytes stored in each dtype a recipe can name (tensors that are not floating point keep
    their own dtype), and under None the size as the recipe stores it when it names no out_dtype."""
    floating = sum(math.prod(task.shape) for task in plan.tasks if task.floating)
    fixed = plan.output_bytes - floating * plan.out_dtype.itemsize
    sizes: dict[str | None, int] = {name: fixed + floating * BY_NAME[name].bytes for name in WRITABLE}
    if not out_dtype:
        sizes[None] = plan.output_bytes
    return sizes
