"""Can these models be merged? Compare tensor names and shapes from their headers, before any download.

The first model is the reference (the base, when a recipe has one); each other model is compared with it.
A different vocabulary (embedding / output rows) is reported on its own, with what to do about it, because it
is the most common reason two fine-tunes of the same model do not merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from guiapp.errors import MergesmithError
from guiapp.hub.headers import TensorRecord
from guiapp.hub.resolve import ModelMetadata, read_model_metadata

# Tensors whose first dimension is the vocabulary size (Llama/Mistral/Qwen, GPT-2, BLOOM, GPT-NeoX names).
_VOCABULARY_TENSORS = (
    "embed_tokens.weight",
    "lm_head.weight",
    "wte.weight",
    "word_embeddings.weight",
    "embed_out.weight",
)
_EXAMPLES = 3


@dataclass(frozen=True)
class CompatibilityProblem:
    """Why `model` will not merge with the reference. `kind`: unreadable, architecture, vocabulary, shape,
    missing (tensors the reference has and this model lacks) or extra (the other way round)."""

    model: str
    kind: str
    message: str
    tensors: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompatibilityReport:
    models: tuple[str, ...]
    problems: tuple[CompatibilityProblem, ...]

    @property
    def compatible(self) -> bool:
        return not self.problems

    def render_text(self) -> str:
        if self.compatible:
            return f"These {len(self.models)} models have the same tensors and shapes: they can be merged."
        lines = [f"These models cannot be merged as they are ({len(self.problems)} problems):"]
        lines += [f"- {problem.message}" for problem in self.problems]
        return "\n".join(lines)


def check_compatibility(references: Sequence[str], *, offline: bool = False) -> CompatibilityReport:
    """Read every model's headers (Hub ids, `id@revision` and local folders mixed) and compare them with the
    first. A model that cannot be read (gated, missing, offline) becomes an "unreadable" problem saying why;
    nothing raises except programming errors.
    """
    readable: list[ModelMetadata] = []
    problems: list[CompatibilityProblem] = []
    for reference in references:
        try:
            readable.append(read_model_metadata(reference, offline=offline))
        except MergesmithError as error:
            hint = f" {error.hint}" if error.hint else ""
            problems.append(
                CompatibilityProblem(reference, "unreadable", f"{reference} cannot be checked: {error}{hint}")
            )
    if readable:
        problems = list(compare_metadata(readable).problems) + problems
    return CompatibilityReport(tuple(references), tuple(problems))


def compare_metadata(models: Sequence[ModelMetadata]) -> CompatibilityReport:
    """Compare each model's tensors and config with the first model's."""
    reference, *others = models
    problems: list[CompatibilityProblem] = []
    for other in others:
        problems += _compare(reference, other)
    return CompatibilityReport(tuple(m.reference for m in models), tuple(problems))


def _compare(base: ModelMetadata, other: ModelMetadata) -> list[CompatibilityProblem]:
    vocabulary = _vocabulary_problem(base, other)
    found = [_architecture_problem(base, other), vocabulary, _shape_problem(base, other, vocabulary)]
    return [p for p in found if p is not None] + _presence_problems(base, other)


def _architecture_problem(base: ModelMetadata, other: ModelMetadata) -> CompatibilityProblem | None:
    base_arch, other_arch = _architecture(base), _architecture(other)
    if not (base_arch and other_arch) or base_arch == other_arch:
        return None
    return CompatibilityProblem(
        other.reference,
        "architecture",
        f"{other.reference} is a {other_arch} model but {base.reference} is a {base_arch} model; "
        "only models of the same architecture can be merged.",
    )


def _shape_problem(
    base: ModelMetadata, other: ModelMetadata, vocabulary: CompatibilityProblem | None
) -> CompatibilityProblem | None:
    explained = set(vocabulary.tensors) if vocabulary else set()
    mismatched = [
        name
        for name, record in other.tensors.items()
        if name in base.tensors and name not in explained and record.shape != base.tensors[name].shape
    ]
    if not mismatched:
        return None
    examples = [f"{n}: {_shape(other.tensors[n])} vs {_shape(base.tensors[n])}" for n in mismatched]
    return CompatibilityProblem(
        other.reference,
        "shape",
        f"{len(mismatched)} tensors of {other.reference} have other shapes than in {base.reference} "
        f"({_first_few(examples, '; ')}): the models have different sizes.",
        tuple(mismatched),
    )


def _presence_problems(base: ModelMetadata, other: ModelMetadata) -> list[CompatibilityProblem]:
    """Tensors one model has and the other lacks ("missing" from `other`, or "extra" in it)."""
    problems = []
    for kind, having, lacking in (("missing", base, other), ("extra", other, base)):
        absent = [name for name in having.tensors if name not in lacking.tensors]
        if not absent:
            continue
        tied = " (it ties its output layer to the embeddings)" if "lm_head.weight" in absent and _ties(lacking) else ""
        problems.append(
            CompatibilityProblem(
                other.reference,
                kind,
                f"{lacking.reference} lacks {len(absent)} tensors that {having.reference} has "
                f"({_first_few(absent, ', ')}){tied}.",
                tuple(absent),
            )
        )
    return problems


def _vocabulary_problem(base: ModelMetadata, other: ModelMetadata) -> CompatibilityProblem | None:
    tensors = tuple(
        t for t in other.tensors
        if t.endswith(_VOCABULARY_TENSORS) and t in base.tensors
        and other.tensors[t].shape[:1] != base.tensors[t].shape[:1]
    )  # fmt: skip
    if not tensors:
        return None
    base_rows, other_rows = base.tensors[tensors[0]].shape[0], other.tensors[tensors[0]].shape[0]
    return CompatibilityProblem(
        other.reference,
        "vocabulary",
        f"{other.reference} has a vocabulary of {other_rows} tokens but {base.reference} has {base_rows}: "
        f"their embedding and output layers ({', '.join(tensors)}) have different numbers of rows, usually because "
        "tokens were added when fine-tuning. Merge with a common tokenizer (mergekit's `tokenizer_source: base` "
        "or `union`), or choose fine-tunes that kept the base vocabulary.",
        tensors,
    )


def _architecture(model: ModelMetadata) -> str | None:
    architectures = model.config.get("architectures") or []
    return architectures[0] if architectures else model.config.get("model_type")


def _ties(model: ModelMetadata) -> bool:
    return bool(model.config.get("tie_word_embeddings"))


def _first_few(items: list[str], separator: str) -> str:
    return separator.join(items[:_EXAMPLES]) + (", …" if len(items) > _EXAMPLES else "")


def _shape(record: TensorRecord) -> str:
    return "×".join(str(d) for d in record.shape) or "scalar"
