"""Merge recipes: mergekit-compatible YAML read into plain dataclasses, and parameter look-up.

The semantics are those of ../shared/spec/merge-methods.md §1. Parsing checks the recipe's form (keys, types,
layer ranges as pairs); whether models, tensors and parameters fit together is checked by `plan.build_plan`
from the models' headers.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from guiapp.errors import RecipeError
from guiapp.hub.references import is_hub_id

TOP_LEVEL_KEYS = {
    "merge_method", "models", "slices", "modules", "base_model", "parameters", "dtype", "out_dtype",
    "tokenizer_source", "tokenizer", "chat_template",
}

@dataclass(frozen=True)
class ModelRef:
    """A model reference: a local folder or a Hub id (optionally `@revision`), optionally `+adapter`."""

    model: str
    revision: str | None = None
    adapter: str | None = None

    @classmethod
    def parse(cls, text: Any) -> ModelRef:
        """Parse `org/name`, `org/name@rev`, a folder path, or any of these `+adapter`.

        Raises RecipeError for anything that is not a non-empty string.
        """
        if isinstance(text, dict) and "model" in text:  # mergekit's long form: {model: ..., lora: ...}
            inner = cls.parse(text["model"])
            return cls(inner.model, inner.revision, text.get("lora") or inner.adapter)
        if not isinstance(text, str) or not text.strip():
            raise RecipeError(f"{text!r} is not a model reference.", hint="Use a Hub id like org/name or a local folder path.")
        text = text.strip()
        adapter = None
        if "+" in text and not Path(text).expanduser().exists():
            text, adapter = text.rsplit("+", 1)
        revision = None
        if "@" in text and not Path(text).expanduser().exists():
            text, revision = text.rsplit("@", 1)
        return cls(text, revision or None, adapter or None)

    @property
    def is_local(self) -> bool:
        """A folder that exists, or anything that cannot be a Hub id (a missing folder is reported later)."""
        return Path(self.model).expanduser().exists() or not is_hub_id(self.model)

    @property
    def hub_id(self) -> str | None:
        return None if self.is_local else self.model

    def __str__(self) -> str:
        text = self.model + (f"@{self.revision}" if self.revision else "")
        return text + (f"+{self.adapter}" if self.adapter else "")


@dataclass
class Source:
    """One model contributing to a slice, with the layers it contributes and its own parameters."""

    model: ModelRef
    layer_range: tuple[int, int] | None
    parameters: dict[str, Any]


@dataclass
class Slice:
    sources: list[Source]
    parameters: dict[str, Any]
    base_model: ModelRef | None


@dataclass
class Recipe:
    """A parsed recipe. `slices is None` means the `models:` form (one slice over all layers)."""

    merge_method: str
    models: list[Source] | None
    slices: list[Slice] | None
    base_model: ModelRef | None
    parameters: dict[str, Any]
    dtype: str | None
    out_dtype: str | None
    tokenizer_source: str | None
    document: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def model_refs(self) -> list[ModelRef]:
        """Every model the recipe names, base included, each once, in order of appearance."""
        refs: list[ModelRef] = []
        sources = self.models or [s for sl in self.slices or [] for s in sl.sources]
        bases = [self.base_model] + [sl.base_model for sl in self.slices or []]
        for ref in [s.model for s in sources] + [b for b in bases if b is not None]:
            if ref not in refs:
                refs.append(ref)
        return refs


def load_recipe(path: Path) -> Recipe:
    """Read a recipe file. Raises RecipeError if it cannot be read or is not a valid recipe."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise RecipeError(f"Cannot read the recipe {path}: {error.strerror}.", hint="Check the file name.") from None
    return parse_recipe(text, label=str(path))


def parse_recipe(text: str, label: str = "The recipe") -> Recipe:
    """Parse recipe YAML (safe_load only: YAML tags that construct objects are refused).

    Raises RecipeError naming the key that is wrong.
    """
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise RecipeError(
            f"{label} is not valid YAML{line}: {problem}.",
            hint="Check the indentation and the quotes around that line. Custom YAML tags (!!python/...) are not allowed.",
        ) from None
    if not isinstance(document, dict):
        raise RecipeError(f"{label} must be a YAML mapping with at least merge_method and models or slices.")
    return recipe_from_dict(document)


def recipe_from_dict(document: dict[str, Any]) -> Recipe:
    """Build a Recipe from an already-parsed mapping (the window's form uses this). Raises RecipeError."""
    warnings: list[str] = []
    for key in document:
        if key not in TOP_LEVEL_KEYS:
            close = difflib.get_close_matches(str(key), TOP_LEVEL_KEYS, n=1)
            guess = f' (did you mean "{close[0]}"?)' if close else ""
            warnings.append(f'Unknown recipe key "{key}" is ignored{guess}.')
    method = document.get("merge_method")
    if not isinstance(method, str) or not method:
        raise RecipeError("The recipe has no merge_method.", hint="Add a line such as `merge_method: ties`.")
    if "modules" in document:
        raise RecipeError(
            "Recipes with `modules:` (multi-module models such as vision-language models) are not supported yet.",
            hint="Merge the language model part with `models:` or `slices:`.",
        )
    has_models, has_slices = "models" in document, "slices" in document
    if has_models == has_slices:
        raise RecipeError(
            "The recipe needs exactly one of `models:` or `slices:`"
            + (" (it has both)." if has_models else " (it has neither)."),
        )
    if "tokenizer" in document and "tokenizer_source" in document:
        raise RecipeError("The recipe sets both `tokenizer` and `tokenizer_source`.", hint="Keep only one of them.")
    tokenizer_source = document.get("tokenizer_source")
    tokenizer = document.get("tokenizer")
    if isinstance(tokenizer, dict):
        tokenizer_source = tokenizer.get("source")
    if tokenizer_source == "union":
        raise RecipeError(
            "`tokenizer_source: union` is not supported yet.",
            hint="Use `tokenizer_source: base` (rows follow the base model's vocabulary) or name one model.",
            retry_with={"tokenizer_source": "base"},
        )
    if document.get("chat_template") not in (None, "auto"):
        warnings.append("chat_template is not applied yet; the tokenizer's own chat template is kept.")

    base = ModelRef.parse(document["base_model"]) if document.get("base_model") else None
    parameters = _mapping(document.get("parameters"), "parameters")
    models = slices = None
    if has_models:
        entries = document["models"]
        if not isinstance(entries, list) or not entries:
            raise RecipeError("`models:` must be a non-empty list of `- model: …` entries.")
        models = [_source(entry, f"models[{i}]", allow_range=False) for i, entry in enumerate(entries)]
    else:
        entries = document["slices"]
        if not isinstance(entries, list) or not entries:
            raise RecipeError("`slices:` must be a non-empty list of `- sources: […]` entries.")
        slices = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("sources"), list) or not entry["sources"]:
                raise RecipeError(f"slices[{i}] needs a non-empty `sources:` list.")
            sources = [_source(s, f"slices[{i}].sources[{j}]", allow_range=True) for j, s in enumerate(entry["sources"])]
            slice_base = ModelRef.parse(entry["base_model"]) if entry.get("base_model") else None
            slices.append(Slice(sources, _mapping(entry.get("parameters"), f"slices[{i}].parameters"), slice_base))
    dtype, out_dtype = document.get("dtype"), document.get("out_dtype")
    for key, value in (("dtype", dtype), ("out_dtype", out_dtype)):
        if value is not None and str(value).lower().removeprefix("torch.") not in _DTYPES:
            raise RecipeError(
                f'`{key}: {value}` is not a dtype Mergesmith can use.',
                hint="Use bfloat16, float16, float32 or float64.",
            )
    return Recipe(
        merge_method=method,
        models=models,
        slices=slices,
        base_model=base,
        parameters=parameters,
        dtype=_canonical_dtype(dtype),
        out_dtype=_canonical_dtype(out_dtype),
        tokenizer_source=tokenizer_source,
        document=document,
        warnings=warnings,
    )


_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
           "float32": "float32", "fp32": "float32", "float": "float32", "float64": "float64", "fp64": "float64"}


def _canonical_dtype(value: Any) -> str | None:
    return None if value is None else _DTYPES[str(value).lower().removeprefix("torch.")]


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecipeError(f"`{where}` must be a mapping of parameter names to values.")
    return dict(value)


def _source(entry: Any, where: str, allow_range: bool) -> Source:
    if not isinstance(entry, dict) or "model" not in entry:
        raise RecipeError(f"{where} needs a `model:` entry.", hint="Each entry looks like `- model: org/name`.")
    layer_range = None
    if "layer_range" in entry:
        if not allow_range:
            raise RecipeError(f"{where} has a layer_range; layer ranges belong in `slices:` sources.")
        value = entry["layer_range"]
        if (
            not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or value[0] < 0 or value[1] <= value[0]
        ):
            raise RecipeError(
                f"{where}.layer_range must be [start, end) with 0 ≤ start < end, got {value!r}.",
                hint="For example `layer_range: [0, 16]` takes layers 0 to 15.",
            )
        layer_range = (value[0], value[1])
    return Source(ModelRef.parse(entry["model"]), layer_range, _mapping(entry.get("parameters"), f"{where}.parameters"))


# --- parameter values ---------------------------------------------------------------------------------------

_MISSING = object()


def as_number(value: Any) -> int | float | None:
    """`value` as a number: numbers as they are, and text that spells one (YAML 1.1 reads `1e-5`, with no dot
    before the exponent, as a string; mergekit accepts it, so Mergesmith does too). None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def layer_position(index: int, count: int) -> float:
    """The gradient position t of layer `index` in a slice of `count` layers (1 when the slice has one layer)."""
    return 1.0 if count <= 1 else index / (count - 1)


def evaluate(value: Any, tensor_name: str, t: float) -> Any:
    """The value a recipe parameter takes for `tensor_name` at gradient position `t`, or `_MISSING`.

    Forms: a scalar; a list of numbers (a gradient, interpolated); a list of booleans or strings (stepped);
    `{filter, value}` or a list of them (first filter that is a substring of the name wins; `*` or no filter
    matches everything). Raises RecipeError for a form it does not know.
    """
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        if not value:
            raise RecipeError("A parameter is an empty list.", hint="Give a number, or a list of numbers for a gradient.")
        if all(isinstance(entry, dict) for entry in value):
            for entry in value:
                if "value" not in entry:
                    raise RecipeError(f"The filtered parameter entry {entry!r} has no `value`.")
                pattern = entry.get("filter")
                if pattern is None or pattern == "*" or str(pattern) in tensor_name:
                    return evaluate(entry["value"], tensor_name, t)
            return _MISSING
        numbers = [as_number(v) for v in value]
        if all(n is not None for n in numbers):
            value = numbers
            position = t * (len(value) - 1)
            low = math.floor(position)
            high = min(len(value) - 1, low + 1)
            frac = position - low
            return (1 - frac) * value[low] + frac * value[high]
        if all(isinstance(v, (bool, str)) for v in value):
            return value[int(t * (len(value) - 1))]
        raise RecipeError(f"The parameter value {value!r} mixes kinds of values.", hint="Use only numbers in a gradient.")
    return value


def lookup(scopes: list[dict[str, Any]], name: str, tensor_name: str, t: float) -> Any:
    """Look `name` up in `scopes` (most specific first); returns `_MISSING` when no scope gives a value."""
    for scope in scopes:
        if name in scope:
            found = evaluate(scope[name], tensor_name, t)
            if found is not _MISSING:
                return found
    return _MISSING


def is_missing(value: Any) -> bool:
    return value is _MISSING
