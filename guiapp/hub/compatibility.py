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
_VOCABULARY_TENSORS = ("embed_tokens.weight", "lm_head.weight", "wte.weight", "word_embeddings.weight", "embed_out.weight")
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
            problems.append(CompatibilityProblem(reference, "unreadable", f"{reference} cannot be checked: {error}{hint}"))
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
    problems = []
    name, base_name = other.reference, base.reference
    base_arch, other_arch = _architecture(base), _architecture(other)
    if base_arch and other_arch and base_arch != other_arch:
        problems.append(
            CompatibilityProblem(
                name, "architecture", f"{name} is a {other_arch} model but {base_name} is a {base_arch} model; "
                "only models of the same architecture can be merged."
            )
        )  # fmt: skip
    vocabulary = _vocabulary_problem(base, other)
    if vocabulary is not None:
        problems.append(vocabulary)
    vocab_tensors = set(vocabulary.tensors) if vocabulary else set()
    mismatched = [
        t for t, record in other.tensors.items()
        if t in base.tensors and t not in vocab_tensors and record.shape != base.tensors[t].shape
    ]  # fmt: skip
    if mismatched:
        examples = "; ".join(
            f"{t}: {_shape(other.tensors[t])} vs {_shape(base.tensors[t])}" for t in mismatched[:_EXAMPLES]
        )
        problems.append(
            CompatibilityProblem(
                name, "shape",
                f"{len(mismatched)} tensors of {name} have other shapes than in {base_name} ({examples}"
                + (", …" if len(mismatched) > _EXAMPLES else "") + "): the models have different sizes.",
                tuple(mismatched),
            )
        )  # fmt: skip
    missing = [t for t in base.tensors if t not in other.tensors]
    extra = [t for t in other.tensors if t not in base.tensors]
    for kind, tensors, where, lacking in (("missing", missing, name, base_name), ("extra", extra, base_name, name)):
        if tensors:
            listed = ", ".join(tensors[:_EXAMPLES]) + (", …" if len(tensors) > _EXAMPLES else "")
            tied = " (it ties its output layer to the embeddings)" if "lm_head.weight" in tensors and _ties(base if kind == "extra" else other) else ""
            problems.append(
                CompatibilityProblem(
                    name, kind, f"{where} lacks {len(tensors)} tensors that {lacking} has ({listed}){tied}.", tuple(tensors)
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


def _shape(record: TensorRecord) -> str:
    return "×".join(str(d) for d in record.shape) or "scalar"
