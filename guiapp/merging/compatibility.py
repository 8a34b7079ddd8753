"""Do these models fit together? The one compatibility check, from tensor names, shapes and configs alone.

Merge planning, the Hub pre-download check (`mergesmith hub check`, the details pane) and the LoRA pair check
(the LoRA page, extraction) all ask here, so the same models get the same problems with the same words
wherever the question is asked; what each caller does with a problem (refuse, warn) is its own business.
The first model is the reference (the base, when there is one); each other model is compared with it.
Torch-free: `hub check` uses it without loading torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guiapp.checkpoints.tensor_roles import TensorRole, architecture_of, tensor_place
from guiapp.errors import MergesmithError
from guiapp.facts.wording import join, say
from guiapp.hub.references import ModelRef
from guiapp.system.units import plural

_EXAMPLES = 3


@dataclass(frozen=True)
class ModelFacts:
    """What the check needs about one model: how messages name it, its tensors' shapes and its config."""

    label: str
    shapes: Mapping[str, tuple[int, ...]]
    config: Mapping[str, Any]

    @classmethod
    def of(cls, label: str, tensors: Mapping[str, Any], config: Mapping[str, Any] | None) -> ModelFacts:
        """From any tensor table whose entries have a `shape` (header records or the engine's TensorInfo)."""
        return cls(label, {name: tuple(t.shape) for name, t in tensors.items()}, config or {})


@dataclass(frozen=True)
class CompatibilityProblem:
    """Why `model` does not fit the reference. `kind`: unreadable, architecture, vocabulary, shape, missing
    (tensors the reference has and this model lacks) or extra (the other way round)."""

    model: str
    kind: str
    message: str
    tensors: tuple[str, ...] = ()
    hint: str | None = None


@dataclass(frozen=True)
class CompatibilityReport:
    models: tuple[str, ...]
    problems: tuple[CompatibilityProblem, ...]

    @property
    def compatible(self) -> bool:
        return not self.problems

    def first(self, *kinds: str) -> CompatibilityProblem | None:
        """The first problem of one of `kinds` (of any kind when none is given), or None."""
        return next((p for p in self.problems if not kinds or p.kind in kinds), None)

    def render_text(self) -> str:
        if self.compatible:
            return f"These {len(self.models)} models have the same tensors and shapes: they can be merged."
        lines = [f"These models cannot be merged as they are ({plural(len(self.problems), 'problem')}):"]
        lines += [f"- {problem.message}" + (f"\n  {problem.hint}" if problem.hint else "") for problem in self.problems]
        return "\n".join(lines)


def check_compatibility(references: Sequence[ModelRef], *, offline: bool = False) -> CompatibilityReport:
    """Read every model's headers (Hub ids, `id@revision` and local folders mixed) and compare them with the
    first. A model that cannot be read (gated, missing, offline) becomes an "unreadable" problem saying why;
    nothing raises except programming errors.
    """
    from guiapp.hub.resolve import read_model_metadata  # noqa: PLC0415 - the Hub client loads only when asked

    readable: list[ModelFacts] = []
    problems: list[CompatibilityProblem] = []
    for reference in references:
        try:
            metadata = read_model_metadata(reference, offline=offline)
        except MergesmithError as error:
            problems.append(CompatibilityProblem(str(reference), "unreadable", join(
                say("{reference} cannot be checked: {problem}", reference=reference, problem=error.message),
                error.hint)))
            continue
        readable.append(ModelFacts.of(str(reference), metadata.tensors, metadata.config))
    if readable:
        problems = list(compare_models(readable).problems) + problems
    return CompatibilityReport(tuple(str(reference) for reference in references), tuple(problems))


def compare_models(models: Sequence[ModelFacts]) -> CompatibilityReport:
    """Compare each model's tensors and config with the first model's. Never raises."""
    reference, *others = models
    problems: list[CompatibilityProblem] = []
    for other in others:
        problems += _compare(reference, other)
    return CompatibilityReport(tuple(m.label for m in models), tuple(problems))


def _compare(base: ModelFacts, other: ModelFacts) -> list[CompatibilityProblem]:
    vocabulary = _vocabulary_problem(base, other)
    found = [_architecture_problem(base, other), vocabulary, _shape_problem(base, other, vocabulary)]
    return [p for p in found if p is not None] + _presence_problems(base, other)


def _architecture_problem(base: ModelFacts, other: ModelFacts) -> CompatibilityProblem | None:
    base_arch, other_arch = _architecture(base), _architecture(other)
    if not (base_arch and other_arch) or base_arch == other_arch:
        return None
    return CompatibilityProblem(
        other.label,
        "architecture",
        f"{other.label} is a {other_arch} model but {base.label} is a {base_arch} model; "
        "only models of the same architecture fit together.",
        hint="Choose models of one family (for a LoRA: the base the fine-tune was made from; its model card "
        "usually names it).",
    )


def _shape_problem(
    base: ModelFacts, other: ModelFacts, vocabulary: CompatibilityProblem | None
) -> CompatibilityProblem | None:
    explained = set(vocabulary.tensors) if vocabulary else set()
    mismatched = [
        name
        for name, shape in other.shapes.items()
        if name in base.shapes and name not in explained and shape != base.shapes[name]
    ]
    if not mismatched:
        return None
    examples = [f"{n}: {_shape(other.shapes[n])} vs {_shape(base.shapes[n])}" for n in mismatched]
    return CompatibilityProblem(
        other.label,
        "shape",
        f"{len(mismatched)} tensors of {other.label} have other shapes than in {base.label} "
        f"({_first_few(examples, '; ')}): the models have different sizes.",
        tuple(mismatched),
        hint="Choose models of the same family and size (for a LoRA: the base the fine-tune was made from).",
    )


def _presence_problems(base: ModelFacts, other: ModelFacts) -> list[CompatibilityProblem]:
    """Tensors one model has and the other lacks ("missing" from `other`, or "extra" in it)."""
    problems = []
    for kind, having, lacking in (("missing", base, other), ("extra", other, base)):
        absent = [name for name in having.shapes if name not in lacking.shapes]
        if not absent:
            continue
        heads = [n for n in absent if tensor_place(n, _architecture(having)).role is TensorRole.HEAD]
        tied = " (it ties its output layer to the embeddings)" if heads and _ties(lacking) else ""
        problems.append(
            CompatibilityProblem(
                other.label,
                kind,
                f"{lacking.label} lacks {len(absent)} tensors that {having.label} has "
                f"({_first_few(absent, ', ')}){tied}.",
                tuple(absent),
                hint="Merging uses what the models share; a LoRA needs a fine-tune and the very base it was "
                "made from (a model with tied embeddings goes with a base that ties them too).",
            )
        )
    return problems


def _vocabulary_problem(base: ModelFacts, other: ModelFacts) -> CompatibilityProblem | None:
    architecture = _architecture(base)
    tensors = tuple(
        name for name, shape in other.shapes.items()
        if name in base.shapes and tensor_place(name, architecture).has_vocabulary_rows
        and shape[:1] != base.shapes[name][:1] and shape[1:] == base.shapes[name][1:]
    )  # fmt: skip
    if not tensors:
        return None
    base_rows, other_rows = base.shapes[tensors[0]][0], other.shapes[tensors[0]][0]
    return CompatibilityProblem(
        other.label,
        "vocabulary",
        f"{other.label} has a vocabulary of {other_rows} tokens but {base.label} has {base_rows}: "
        f"their embedding and output layers ({', '.join(tensors)}) have different numbers of rows, usually because "
        "tokens were added when fine-tuning.",
        tensors,
        hint="To merge them, use a common tokenizer (`tokenizer_source: base` or `union` in the recipe); to "
        f"extract a LoRA, resize the base's embeddings to {other_rows} tokens first (in transformers: "
        f"model.resize_token_embeddings({other_rows}), then save it) and extract from that resized base.",
    )


def _architecture(model: ModelFacts) -> str | None:
    return architecture_of(dict(model.config)) or model.config.get("model_type")


def _ties(model: ModelFacts) -> bool:
    return bool(model.config.get("tie_word_embeddings"))


def _first_few(items: list[str], separator: str) -> str:
    return separator.join(items[:_EXAMPLES]) + (", …" if len(items) > _EXAMPLES else "")


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(str(d) for d in shape) or "scalar"
