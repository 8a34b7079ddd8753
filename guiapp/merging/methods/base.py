"""What a merge method is: its declaration (guiapp.merging.method_declarations: name, words, typed parameters)
and a per-tensor function.

A method's module attaches its merge function to its declaration (`MergeMethod.implementing`, a module's `METHOD`,
or a row of the task-vector table). The window builds its forms from the declarations' `params` without waiting
for torch, the recipe validator checks values against them, and the merge loop calls `merge(ctx)` once per output
tensor with every input already in the compute dtype (float32, or float64) on the chosen device.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

import torch

from guiapp.compute.parallel import RunEach, one_at_a_time
from guiapp.merging.method_schema import MethodDeclaration


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


@dataclass(frozen=True, kw_only=True)
class MergeMethod(MethodDeclaration):
    """A merge method: its declaration plus the per-tensor function.

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
    at the end), so `--compute-dtype recipe` keeps float32 for them.
    """

    merge: Callable[[MergeContext], torch.Tensor]
    working_copies: WorkingCopies
    lone_tensor: LoneTensorPolicy = LoneTensorPolicy.MERGE_AVAILABLE
    check_inputs: Callable[[int, bool], str | None] = lambda n_non_base, has_base: None
    check_params: Callable[[list[dict[str, Any]], dict[str, Any], str], None] = lambda model_params, params, name: None
    copies_input: Callable[[list[dict[str, Any]], dict[str, Any]], bool] = lambda model_params, params: False
    merge_stored: Callable[[MergeContext], torch.Tensor] | None = None
    elementwise: bool = False
    survey: Callable[[TensorSettings], TensorSurvey | None] | None = None
    mergekit_float32: bool = False

    @classmethod
    def implementing(cls, declaration: MethodDeclaration, **implementation: Any) -> MergeMethod:
        """The method `declaration` declares, merged by `implementation` (this class's own fields). Raises
        TypeError when a field the class needs is missing."""
        declared = {spec.name: getattr(declaration, spec.name) for spec in fields(MethodDeclaration)}
        return cls(**declared, **implementation)
