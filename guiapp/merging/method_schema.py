"""What a merge method declares, without its arithmetic: its name, words, group, base role and typed parameters.

Torch-free, so the window builds the Merge page from the declarations (guiapp.merging.method_declarations) at once,
while the merge functions (guiapp.merging.methods, which import torch) load in the background.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


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


@dataclass(frozen=True, kw_only=True)
class MethodDeclaration:
    """What the window, the recipe format and the docs know of a method: its `name` in recipes, the window's `title`
    and `summary` of it, the `paper` it comes from, how it treats `base_model`, its parameters and the `group` the
    window offers it in. guiapp.merging.methods.base.MergeMethod adds the merge function to it."""

    name: str
    title: str
    summary: str
    paper: str | None
    base_role: BaseRole
    params: tuple[ParamSpec, ...]
    group: MethodGroup

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def per_model_params(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if p.per_model)

    @property
    def global_params(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if not p.per_model)
