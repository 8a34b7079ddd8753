"""What a merge method is: a name, a typed parameter schema, and a per-tensor function.

A method is declared as one `MergeMethod(...)` (a module's `METHOD`, or a row of the task-vector table). The
window builds its forms from `params` and offers it in its `group`, the recipe validator checks values against
them, and the merge loop calls `merge(ctx)` once per output tensor with every input already in the compute dtype
(float32, or float64) on the chosen device.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from guiapp.compute.parallel import RunEach, one_at_a_time


class ParamKind(str, Enum):
    FLOAT = "float"
    INT = "int"
    BOOL = "bool"


class BaseRole(str, Enum):
    """How a method treats `base_model`."""

    REQUIRED = "required"  # task vectors are taken against it; a recipe without one is refused
    OPTIONAL = "optional"  # used when given (task vectors), otherwise the method works on the inputs alone
    INPUT = "input"  # no special role: an unlisted base is simply one more input (linear, karcher, passthrough)


@dataclass(frozen=True)
class MethodGroup:
    """What a user wants to do with a method, as the window offers methods: each in its group, the group's
    `recommended` method first and marked."""

    title: str
    when: str
    recommended: str


COMBINE_FINE_TUNES = MethodGroup("Combine fine-tunes of one base", "Several models fine-tuned from the same base "
                                 "model: keep what each learnt.", "ties")
BLEND = MethodGroup("Blend models", "Two or more models of the same shape: a weighted mix of their weights.", "slerp")
STACK_LAYERS = MethodGroup("Stack layers", "Build a model from layers of others (slices), copied unchanged.",
                           "passthrough")
METHOD_GROUPS = (COMBINE_FINE_TUNES, BLEND, STACK_LAYERS)  # in the order the window lists them


@dataclass(frozen=True)
class WorkingCopies:
    """Float32 copies of one tensor a method holds while it merges n inputs: `constant + per_input × n`.

    Measured with benchmarks/method_memory.py (a 16 M-element tensor merged at n = 3 and n = 5), then raised
    where whole merges peaked higher (tests/jobs/test_estimates.py compares with real merges). The estimator
    uses it for memory and, as a measure of work, for time.
    """

    constant: float
    per_input: float

    def for_inputs(self, count: int) -> float:
        return self.constant + self.per_input * count


class LoneTensorPolicy(str, Enum):
    """What to do with a tensor only some inputs have (docs/spec/merge-methods.md §1, "Shapes and missing tensors")."""

    MERGE_AVAILABLE = "merge_available"  # merge the inputs that have it; fail if the missing one is the base
    COPY_ONLY_COPY = "copy_only_copy"  # one copy: take it as is (slerp, nuslerp, arcee_fusion)
    COPY_IF_BASE = "copy_if_base"  # one copy: take it only if it is the base's, else fail (nearswap)
    MODEL_STOCK = "model_stock"  # lone base copied; fewer than 3 inputs: tensor left out


@dataclass(frozen=True)
class ParamSpec:
    """One parameter a method declares.

    `default=None` with `required=True` means the recipe must give it. `per_model` parameters are looked up
    under each model first (weight, density…); the others are method-wide (t, normalize, lambda…). `label` is the
    window's words for it where the words for its key (guiapp.jobs.plain_words) would mislead in this method;
    `suggested` the value the window offers for a required parameter that the range alone does not suggest.

    `minimum`/`maximum` refuse only what mergekit fails on or computes garbage from; `usual` is the range published
    recipes keep to: a value outside it is merged as mergekit merges it, with a warning that says `unusual` (what
    such a value does).
    """

    name: str
    kind: ParamKind
    default: Any = None
    required: bool = False
    per_model: bool = False
    minimum: float | None = None
    maximum: float | None = None
    help: str = ""
    label: str = ""
    suggested: float | None = None
    usual: tuple[float, float] | None = None
    unusual: str = ""

    @property
    def span(self) -> tuple[float | None, float | None]:
        """Where a value usually lies: the `usual` range, else the hard limits (an end may be open: None)."""
        return self.usual if self.usual is not None else (self.minimum, self.maximum)


def row_halves(block: torch.Tensor) -> list[slice]:
    """The rows of a block in two halves, for `run_each` to work on at once when each entry depends on its own
    position alone; one part for a block of one row."""
    half = block.shape[0] // 2 if block.dim() else 0
    return [slice(0, half), slice(half, None)] if half else [slice(None)]


@dataclass
class MergeContext:
    """Everything a method needs to merge one output tensor.

    `tensors` are all inputs for this tensor in recipe order (the base among them at `base_index`, or
    `base_index is None`), in the compute dtype on the compute device. `model_params[i]` holds the resolved
    per-model parameters of input i, `params` the method-wide ones; both have every declared parameter
    (defaults filled in). Methods record statistics in `stats` (e.g. "kept_fraction"). `run_each(function, items)`
    returns [function(item) for item in items]; the merge loop may run the calls at once on threads of their own
    (`guiapp.compute.parallel`), so a method passes it only calls that share nothing one of them changes.
    """

    tensor_name: str
    tensors: list[torch.Tensor]
    base_index: int | None
    model_params: list[dict[str, Any]]
    params: dict[str, Any]
    model_names: list[str]
    generator: torch.Generator
    stats: dict[str, float] = field(default_factory=dict)
    run_each: RunEach = one_at_a_time

    @property
    def base(self) -> torch.Tensor | None:
        return None if self.base_index is None else self.tensors[self.base_index]

    def non_base(self) -> list[int]:
        """Indices of the inputs that are not the base, in recipe order."""
        return [i for i in range(len(self.tensors)) if i != self.base_index]


class TensorSurvey(ABC):
    """How a method merges one large tensor a block of rows at a time when each entry's result depends on the rest
    of the tensor only through a few numbers it can learn first (TIES' magnitude threshold per model).

    While `passes_left`, the merge loop shows `count` every block of the tensor, in order, and calls `end_pass`
    after the last (a pass may find that it needs another: `passes_left` can grow then); then it calls `merge` on
    every block, in order, and writes what it returns. Each block comes as a MergeContext whose tensors are the
    inputs' rows of that block. So memory holds a few blocks, never the tensor, and the result is the one the
    method's `merge` gives on the whole tensor.
    """

    @property
    @abstractmethod
    def passes_left(self) -> int:
        """How many more passes over the blocks the survey needs before it can merge."""

    @property
    def samples_next_pass(self) -> bool:
        """Whether the next pass looks at only some entries of each block (`sample_positions`): the loop then reads
        only some of each block's rows for it."""
        return False

    def sample_positions(self, numel: int, block_numel: int | None = None) -> torch.Tensor | None:
        """Asked before each block's `count`: when the current pass looks at only some entries of each block, their
        flat positions in the next `numel` entries (the loop then converts and shows just those, as 1-D tensors);
        None: the whole block. `block_numel`: the size of the whole block, when the `numel` entries are the part
        of it the loop read."""
        return None

    @abstractmethod
    def count(self, block: MergeContext) -> None:
        """Learn from one block in the current pass (or from its entries at `sample_positions`)."""

    @abstractmethod
    def end_pass(self) -> None:
        """Called after the last block of each pass."""

    @abstractmethod
    def merge(self, block: MergeContext) -> torch.Tensor:
        """The merged rows of one block, in the compute dtype."""


@dataclass(frozen=True)
class TensorSettings:
    """What a method knows of one output tensor before reading it: its resolved parameters (as in MergeContext),
    its number of entries and the compute dtype."""

    model_params: list[dict[str, Any]]
    params: dict[str, Any]
    base_index: int | None
    numel: int
    dtype: torch.dtype


@dataclass(frozen=True)
class MergeMethod:
    """A merge method: schema plus the per-tensor function.

    `check_inputs(n_non_base, has_base)` returns None when the method can merge that many inputs, else a
    message for the user; it runs at validation time, before any tensor is read. `check_params(model_params,
    params, tensor_name)` checks the resolved parameters of one output tensor together (a constraint no single
    parameter's range expresses) and raises RecipeError when they cannot be used. `copies_input(model_params,
    params)` says that with these parameters the method's result is its single input unchanged (passthrough at
    scale 1): the tensor is then copied, as stored where its dtype allows, instead of merged. `merge_stored(ctx)`
    merges inputs stored in the output's dtype, bf16 or fp16, as they are: computed in float32 and rounded once into
    that dtype, without converting whole inputs first (the entries meet in the cache). `working_copies` is
    what the estimator needs to know about the method's memory. `elementwise` methods compute
    each entry from the inputs' entries at the same position alone, so the loop may merge a tensor in blocks of
    rows that stay in the CPU's cache. A method with a `survey` can do the same after a look at the whole tensor:
    given a tensor's settings it returns a fresh TensorSurvey, or None when those settings need the whole tensor.
    `mergekit_float32` methods are computed in float32 by mergekit 0.1.5 whatever the recipe's dtype (rounded once
    at the end), so `--compute-dtype recipe` keeps float32 for them. `group` is where the window offers it.
    """

    name: str
    title: str
    summary: str
    paper: str | None
    base_role: BaseRole
    params: tuple[ParamSpec, ...]
    merge: Callable[[MergeContext], torch.Tensor]
    working_copies: WorkingCopies
    group: MethodGroup
    lone_tensor: LoneTensorPolicy = LoneTensorPolicy.MERGE_AVAILABLE
    check_inputs: Callable[[int, bool], str | None] = lambda n_non_base, has_base: None
    check_params: Callable[[list[dict[str, Any]], dict[str, Any], str], None] = lambda model_params, params, name: None
    copies_input: Callable[[list[dict[str, Any]], dict[str, Any]], bool] = lambda model_params, params: False
    merge_stored: Callable[[MergeContext], torch.Tensor] | None = None
    elementwise: bool = False
    survey: Callable[[TensorSettings], TensorSurvey | None] | None = None
    mergekit_float32: bool = False

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def per_model_params(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if p.per_model)

    @property
    def global_params(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if not p.per_model)
