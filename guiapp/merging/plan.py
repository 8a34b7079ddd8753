"""Turning a recipe and the models' headers into a plan: every output tensor, its inputs and parameters.

Everything a user can get wrong is found here, from headers and configs alone, before a byte of weights is
read or downloaded: unknown method, missing or out-of-range parameters, layer ranges past the end, shape and
vocabulary mismatches, missing tensors, input counts the method cannot merge.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.quantized.notes import task_vector_warning
from guiapp.checkpoints.reading import TensorInfo, dtype_from_name
from guiapp.checkpoints.sources import ModelHeaders
from guiapp.checkpoints.tensor_roles import (
    TensorRole,
    architecture_of,
    comes_before_layers,
    is_vocabulary_tensor,
    split_layer_name,
    tensor_place,
)
from guiapp.errors import BASE_TOKENIZER, IncompatibleModelsError, RecipeError
from guiapp.facts.dtypes import dtype_name
from guiapp.hub.references import ModelRef
from guiapp.merging.compatibility import ModelFacts, compare_models
from guiapp.merging.method_schema import BaseRole, ParamKind, ParamSpec
from guiapp.merging.methods import METHODS, get_method
from guiapp.merging.methods.base import LoneTensorPolicy, MergeMethod
from guiapp.merging.recipe import Recipe, Source, as_number, is_missing, layer_position, lookup
from guiapp.merging.tokenizers import VocabularyAlignment
from guiapp.system.bounded import describe_value

_LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


@dataclass(frozen=True)
class TensorInput:
    """One input of an output tensor: which model, which of its tensors, and how to align its rows.

    `rows` is set when the vocabularies differ and `tokenizer_source` decides the row count: the input is cut
    to `rows`, or padded with the rows of model `pad_from` (the tokenizer source).
    """

    model: int
    tensor: str
    rows: int | None = None
    pad_from: tuple[int, str] | None = None


@dataclass
class TensorTask:
    """One output tensor. `copy` means: write the single input as is (no method call)."""

    name: str
    shape: tuple[int, ...]
    inputs: list[TensorInput]
    base_index: int | None
    model_params: list[dict[str, Any]]
    params: dict[str, Any]
    copy: bool = False
    floating: bool = True
    # Set by `align_vocabulary` on embedding / output-head tasks when the recipe chooses a tokenizer.
    vocabulary: VocabularyAlignment | None = None


@dataclass
class MergePlan:
    recipe: Recipe
    method: MergeMethod
    models: list[ModelHeaders]
    tasks: list[TensorTask]
    read_dtype: torch.dtype | None
    compute_dtype: torch.dtype
    out_dtype: torch.dtype
    config: dict[str, Any] | None
    config_model: int
    tokenizer_model: int
    warnings: list[str] = field(default_factory=list)
    tokenizer_donor: ModelRef | None = None
    # The output tokenizer.json built by `align_vocabulary` (None: the tokenizer files are copied as they are).
    tokenizer_document: dict[str, Any] | None = None
    # True when the merge was asked for mergekit's arithmetic (the recipe's dtype) over float32: see compute_dtype_of.
    compute_as_recipe: bool = False

    def out_tensor_dtype(self, task: TensorTask) -> torch.dtype:
        if not task.floating:
            return self.models[task.inputs[0].model].tensors[task.inputs[0].tensor].dtype
        return self.out_dtype

    @property
    def output_bytes(self) -> int:
        return sum(math.prod(t.shape) * self.out_tensor_dtype(t).itemsize for t in self.tasks)

    @property
    def input_bytes(self) -> int:
        return sum(self.task_input_bytes(task) for task in self.tasks)

    def task_input_bytes(self, task: TensorTask) -> int:
        return sum(self.models[i.model].tensors[i.tensor].nbytes for i in task.inputs)



@dataclass
class _SliceInputs:
    """A slice normalised: its sources with resolved layer ranges, its parameters and its base index."""

    sources: list[Source]
    models: list[int]
    ranges: list[tuple[int, int]]
    parameters: dict[str, Any]
    base_index: int | None

    @property
    def layer_count(self) -> int:
        start, end = self.ranges[0]
        return end - start


def build_plan(recipe: Recipe, headers: dict[ModelRef, ModelHeaders], compute_as_recipe: bool = False) -> MergePlan:
    """Validate `recipe` (one without `modules:`; guiapp.merging.modules plans those, a plan per module) against the
    models' headers and plan every output tensor, computed in float32 (float64 for float64 inputs) or, with
    `compute_as_recipe`, as mergekit computes (`compute_dtype_of`).

    `headers` must hold every model `recipe.model_refs()` names. Raises RecipeError for a problem in the
    recipe and IncompatibleModelsError when the models do not fit together; each message names the model,
    tensor and setting concerned.
    """
    method = get_method(recipe.merge_method)
    warnings = list(recipe.warnings)
    models: list[ModelHeaders] = []
    index_of: dict[ModelRef, int] = {}
    for ref in recipe.model_refs():
        index_of[ref] = len(models)
        models.append(headers[ref])

    warnings += _compatibility_warnings(recipe, models, index_of)
    base = recipe.base_model if method.base_role is not BaseRole.INPUT else None
    warnings += task_vector_warning([(m.label, m.quantization) for m in models if m.quantization], base and str(base))
    layers = [_layers_by_index(model) for model in models]
    slices = _normalise_slices(recipe, method, models, index_of, layers)
    warnings += _unused_parameter_warnings(recipe, method)

    tokenizer_model = _tokenizer_model(recipe, index_of)
    tasks: list[TensorTask] = []
    first, last = slices[0], slices[-1]
    pre, post = _outside_layer_names(first, models, before=True), _outside_layer_names(last, models, before=False)
    for name in pre:
        tasks += _plan_tensor(name, lambda m, n=name: n, first, 0.0, recipe, method, models, tokenizer_model, warnings)
    offset = 0
    for slice_inputs in slices:
        for j, suffixes in _slice_layers(slice_inputs, layers):  # only the layers that exist, whatever their index
            t = layer_position(j, slice_inputs.layer_count)
            for prefix, suffix in suffixes:
                out_name = f"{prefix}.{offset + j}.{suffix}"

                def source_name(position: int, j=j, suffix=suffix, prefix=prefix, s=slice_inputs) -> str:
                    return f"{prefix}.{s.ranges[position][0] + j}.{suffix}"

                tasks += _plan_tensor(out_name, source_name, slice_inputs, t, recipe, method, models,
                                      tokenizer_model, warnings)
        offset += slice_inputs.layer_count
    for name in post:
        tasks += _plan_tensor(name, lambda m, n=name: n, last, 0.0, recipe, method, models, tokenizer_model, warnings)
    if not tasks:
        raise IncompatibleModelsError("The models share no tensors, so there is nothing to merge.")
    warnings += _unusual_value_warnings(method, tasks)

    read_dtype = dtype_from_name(recipe.dtype) if recipe.dtype else None
    input_dtypes = {models[i.model].tensors[i.tensor].dtype for t in tasks for i in t.inputs if t.floating}
    exact = torch.float64 if torch.float64 in input_dtypes or read_dtype == torch.float64 else torch.float32
    config_model = _config_model(recipe, index_of)
    compute_dtype = compute_dtype_of(method, read_dtype, models[config_model], exact, compute_as_recipe)
    if recipe.out_dtype:
        out_dtype = dtype_from_name(recipe.out_dtype)
    elif read_dtype is not None:
        out_dtype = read_dtype
    else:
        out_dtype = _storage_dtype(models[config_model])
    config = _output_config(models, config_model, tasks, out_dtype, offset, tokenizer_model)
    return MergePlan(recipe, method, models, tasks, read_dtype, compute_dtype, out_dtype, config, config_model,
                     tokenizer_model, warnings, recipe.tokenizer_donor(), compute_as_recipe=compute_as_recipe)


def _compatibility_warnings(recipe: Recipe, models: list[ModelHeaders], index_of: dict[ModelRef, int]) -> list[str]:
    """Run the one compatibility check over the models of a `models:` recipe, the base first (slices combine
    models of different depths on purpose, and are checked tensor by tensor).

    Raises IncompatibleModelsError with the check's message for what no setting resolves (architecture,
    shapes) and for a vocabulary mismatch when the recipe does not say which tokenizer to follow; returns
    the check's messages about tensors only some models have (one per model, however many tensors; the method's
    lone-tensor rule decides what happens to each).
    """
    if recipe.models is None or len(models) < 2:
        return []
    first = index_of[recipe.base_model] if recipe.base_model is not None else 0
    ordered = [models[first]] + [m for i, m in enumerate(models) if i != first]
    report = compare_models([ModelFacts.of(m.label, m.tensors, m.config) for m in ordered])
    blocking = report.first("architecture", "shape")
    if blocking is None and recipe.tokenizer_source is None:
        blocking = report.first("vocabulary")
    if blocking is not None:
        retry = BASE_TOKENIZER if blocking.kind == "vocabulary" and recipe.base_model else None
        raise IncompatibleModelsError(blocking.message, hint=blocking.hint, remedy=retry)
    return [p.message for p in report.problems if p.kind in ("missing", "extra")]


def _normalise_slices(
    recipe: Recipe, method: MergeMethod, models: list[ModelHeaders], index_of: dict[ModelRef, int],
    layers: list[dict[int, list[tuple[str, str]]]],
) -> list[_SliceInputs]:
    if recipe.models is not None:
        sources = list(recipe.models)
        if recipe.base_model is not None and all(s.model != recipe.base_model for s in sources):
            sources.append(Source(recipe.base_model, None, {}))
        raw_slices = [(sources, {}, recipe.base_model)]
    else:
        raw_slices = [(s.sources, s.parameters, s.base_model or recipe.base_model) for s in recipe.slices]

    result = []
    counts = [max(by_index, default=-1) + 1 for by_index in layers]  # once per model, not per slice
    for number, (sources, parameters, base) in enumerate(raw_slices):
        where = "" if recipe.models is not None else f" in slice {number + 1}"
        ranges = []
        for source in sources:
            model = models[index_of[source.model]]
            available = counts[index_of[source.model]]
            if source.layer_range is None:
                ranges.append((0, available))
                continue
            start, end = source.layer_range
            if end > available:
                raise RecipeError(
                    f"layer_range [{start}, {end}] of {model.label}{where} goes past the end: the model has "
                    f"{available} layers (0 to {available - 1}).",
                    hint=f"Use an end of at most {available}.",
                    key=("slices", number),
                )
            ranges.append((start, end))
        spans = {end - start for start, end in ranges}
        if len(spans) > 1:
            described = ", ".join(f"{s.model} {r[1] - r[0]}" for s, r in zip(sources, ranges))
            raise IncompatibleModelsError(
                f"The inputs{where} span different numbers of layers ({described}).",
                hint="Every source of a slice must contribute the same number of layers; "
                "use slices with layer_range to combine models of different depth.",
            )
        base_index = None
        if method.base_role is not BaseRole.INPUT and base is not None:
            base_index = next((i for i, s in enumerate(sources) if s.model == base), None)
            if base_index is None:
                raise RecipeError(
                    f"The base model {base} is not among the inputs of slice {number + 1}.",
                    hint="Add the base model to every slice's sources with the same layer_range.",
                    key=("slices", number),
                )
        if method.base_role is BaseRole.REQUIRED and base_index is None:
            raise RecipeError(
                f"{method.name} needs a base model (the model the others were fine-tuned from).",
                hint="Add `base_model: org/name` to the recipe.",
                key=("base_model",),
            )
        problem = method.check_inputs(len(sources) - (base_index is not None), base_index is not None)
        if problem:
            raise RecipeError(f"{problem}{where}.", key=("models",) if recipe.models is not None else ("slices", number))
        result.append(_SliceInputs(list(sources), [index_of[s.model] for s in sources], ranges, parameters, base_index))
    return result


def _outside_layer_names(slice_inputs: _SliceInputs, models: list[ModelHeaders], before: bool) -> list[str]:
    names: set[str] = set()
    for model_index in slice_inputs.models:
        architecture = architecture_of(models[model_index].config)
        for name in models[model_index].tensors:
            if split_layer_name(name) is None and comes_before_layers(name, architecture) == before:
                names.add(name)
    return sorted(names)


def _layers_by_index(model: ModelHeaders) -> dict[int, list[tuple[str, str]]]:
    """The model's layer tensors as (prefix, suffix) pairs per layer index, in one pass over its names."""
    layers: dict[int, list[tuple[str, str]]] = {}
    for name in model.tensors:
        parts = split_layer_name(name)
        if parts is not None:
            layers.setdefault(parts.index, []).append((parts.prefix, parts.suffix))
    return layers


def _slice_layers(
    slice_inputs: _SliceInputs, layers: list[dict[int, list[tuple[str, str]]]]
) -> list[tuple[int, list[tuple[str, str]]]]:
    """Each layer position j of the slice that some source has, with the (prefix, suffix) pairs found there
    (sorted by suffix), in order of j. Costs the smaller of the slice's range and the model's layer count, so
    thousands of one-layer slices of a deep model stay linear, and so does a range up to index 999,999,999."""
    found: dict[int, dict[tuple[str, str], None]] = {}
    for position, model_index in enumerate(slice_inputs.models):
        start, end = slice_inputs.ranges[position]
        by_index = layers[model_index]
        indices = range(start, end) if end - start < len(by_index) else by_index
        for index in indices:
            pairs = by_index.get(index)
            if pairs is not None and start <= index < end:
                found.setdefault(index - start, {}).update(dict.fromkeys(pairs))
    return [(j, sorted(found[j], key=lambda pair: pair[1])) for j in sorted(found)]


def _tied_embedding(model: ModelHeaders) -> str | None:
    """The token embeddings of `model`, which stand in for the output head it ties to them."""
    architecture = architecture_of(model.config)
    return next((n for n in model.tensors if n.endswith(".weight")
                 and tensor_place(n, architecture).role is TensorRole.EMBEDDING), None)


def _plan_tensor(
    out_name: str,
    source_name,
    slice_inputs: _SliceInputs,
    t: float,
    recipe: Recipe,
    method: MergeMethod,
    models: list[ModelHeaders],
    tokenizer_model: int,
    warnings: list[str],
) -> list[TensorTask]:
    present: list[int] = []
    names: list[str] = []
    for position, model_index in enumerate(slice_inputs.models):
        model = models[model_index]
        name = source_name(position)
        if name not in model.tensors and tensor_place(name, architecture_of(model.config)).role is TensorRole.HEAD:
            name = _tied_embedding(model) or name  # a tied model's embeddings stand in for its output head
        if name in model.tensors:
            present.append(position)
            names.append(name)
    if not present:
        return []
    base = slice_inputs.base_index
    missing = [p for p in range(len(slice_inputs.models)) if p not in present]
    copy = False
    if missing:
        labels = ", ".join(models[slice_inputs.models[p]].label for p in missing)
        policy = method.lone_tensor
        if len(present) == 1 and (
            policy is LoneTensorPolicy.COPY_ONLY_COPY
            or (policy in (LoneTensorPolicy.COPY_IF_BASE, LoneTensorPolicy.MODEL_STOCK) and present[0] == base)
        ):
            copy = True
        elif policy is LoneTensorPolicy.COPY_IF_BASE:
            raise IncompatibleModelsError(
                f'{out_name} is missing from {labels}, and {method.name} can only copy a tensor that the base has.',
                hint="Merge models of the same architecture.",
            )
        elif policy is LoneTensorPolicy.MODEL_STOCK and len(present) < 3:
            warnings.append(f"{out_name} is left out: model_stock needs it in at least 3 inputs ({labels} lack it).")
            return []
        elif base is not None and base in missing and method.base_role is BaseRole.REQUIRED:
            raise IncompatibleModelsError(
                f"The base model {models[slice_inputs.models[base]].label} has no tensor {source_name(base)}, "
                f"which {labels if len(missing) > 1 else 'another input'} needs.",
                hint="Check that the base model is the one the others were fine-tuned from.",
            )
        elif recipe.models is None:  # a `models:` recipe's compatibility check already named what is missing
            warnings.append(f"{out_name} is missing from {labels}; it is merged from the other inputs.")

    infos = [models[slice_inputs.models[p]].tensors[n] for p, n in zip(present, names)]
    floating = all(info.dtype.is_floating_point for info in infos)
    inputs = [TensorInput(slice_inputs.models[p], n) for p, n in zip(present, names)]
    shape = _common_shape(out_name, infos, inputs, recipe, models, tokenizer_model)
    if shape != infos[0].shape or any(info.shape != shape for info in infos):
        inputs = _align_rows(inputs, infos, shape, tokenizer_model)

    base_position = present.index(base) if base is not None and base in present else None
    if not floating or copy:
        return [TensorTask(out_name, shape, inputs, base_position, [], {}, copy=True, floating=floating)]
    # The base's own per-model parameters are never used by a method that has a base, so none is required.
    model_params = [
        _resolve_params(method.per_model_params,
                        [slice_inputs.sources[p].parameters, slice_inputs.parameters, recipe.parameters],
                        name, t, out_name, models[slice_inputs.models[p]].label, enforce_required=p != base,
                        key=("models", p) if recipe.models is not None else ("slices",))
        for p, name in zip(present, names)
    ]
    params = _resolve_params(method.global_params, [slice_inputs.parameters, recipe.parameters], out_name, t,
                             out_name, None)
    method.check_params(model_params, params, out_name)
    if len(inputs) == 1 and method.copies_input(model_params, params):
        return [TensorTask(out_name, shape, inputs, base_position, [], {}, copy=True, floating=floating)]
    return [TensorTask(out_name, shape, inputs, base_position, model_params, params)]


def _common_shape(
    out_name: str, infos: list[TensorInfo], inputs: list[TensorInput], recipe: Recipe,
    models: list[ModelHeaders], tokenizer_model: int,
) -> tuple[int, ...]:
    shapes = {info.shape for info in infos}
    if len(shapes) == 1:
        return infos[0].shape
    described = ", ".join(f"{models[i.model].label} {list(info.shape)}" for i, info in zip(inputs, infos))
    rest = {info.shape[1:] for info in infos}
    if is_vocabulary_tensor(out_name) and len(rest) == 1:
        if recipe.tokenizer_source is None:
            base = recipe.base_model
            raise IncompatibleModelsError(
                f"The models have different vocabularies: {out_name} has {described} rows per token.",
                hint="Set `tokenizer_source: base` so that the result uses the base model's vocabulary"
                + ("" if base else " (this also needs a base_model)") + ", or merge models that share a tokenizer.",
                remedy=BASE_TOKENIZER if base else None,
            )
        source = models[tokenizer_model]
        own = next((i for i in inputs if i.model == tokenizer_model), None)
        if own is None:
            raise IncompatibleModelsError(
                f"The tokenizer source {source.label} has no {out_name}, so its vocabulary size is unknown.",
                hint="Use `tokenizer_source: base` with a base model that has this tensor.",
            )
        return source.tensors[own.tensor].shape
    raise IncompatibleModelsError(
        f"{out_name} has different shapes in the inputs: {described}.",
        hint="These models do not share an architecture (or size); merge models of the same family and size.",
    )


def _align_rows(inputs: list[TensorInput], infos: list[TensorInfo], shape, tokenizer_model: int) -> list[TensorInput]:
    reference = next(i for i in inputs if i.model == tokenizer_model)
    aligned = []
    for item, info in zip(inputs, infos):
        if info.shape == shape:
            aligned.append(item)
        else:
            pad = (reference.model, reference.tensor) if info.shape[0] < shape[0] else None
            aligned.append(TensorInput(item.model, item.tensor, rows=min(info.shape[0], shape[0]), pad_from=pad))
    return aligned


def _resolve_params(
    specs: tuple[ParamSpec, ...],
    scopes: list[dict[str, Any]],
    filter_name: str,
    t: float,
    out_name: str,
    model_label: str | None,
    enforce_required: bool = True,
    key: tuple[str | int, ...] = (),
) -> dict[str, Any]:
    """The values of `specs` for one tensor. Raises RecipeError whose key is `key` + ("parameters", name):
    `key` says whose parameters they are (("models", 2) for the third model; () for the recipe's own)."""
    values: dict[str, Any] = {}
    for spec in specs:
        value = lookup(scopes, spec.name, filter_name, t, (*key, "parameters", spec.name))
        if is_missing(value) and spec.required and not enforce_required:
            values[spec.name] = None
            continue
        if is_missing(value):
            if spec.required:
                whose = f" for {model_label}" if model_label else ""
                raise RecipeError(
                    f"The parameter `{spec.name}` is missing{whose} (needed for tensor {out_name}).",
                    hint=f"Add `{spec.name}: …` under that model's `parameters:` ({spec.help})"
                    if model_label else f"Add `{spec.name}: …` under the recipe's `parameters:` ({spec.help})",
                    key=(*key, "parameters", spec.name),
                )
            value = spec.default
        values[spec.name] = _checked(spec, value, out_name, model_label, (*key, "parameters", spec.name))
    return values


def _checked(spec: ParamSpec, value: Any, out_name: str, model_label: str | None, key: tuple[str | int, ...]) -> Any:
    whose = f" of {model_label}" if model_label else ""
    if spec.kind is ParamKind.BOOL:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        raise RecipeError(f"`{spec.name}`{whose} must be true or false, got {describe_value(value)}.", key=key)
    number = as_number(value)
    if number is None:
        raise RecipeError(f"`{spec.name}`{whose} must be a number, got {describe_value(value)} (tensor {out_name}).",
                          key=key)
    value = number
    if spec.kind is ParamKind.INT:
        if float(value) != int(value):
            raise RecipeError(f"`{spec.name}`{whose} must be a whole number, got {describe_value(value)}.", key=key)
        value = int(value)
    if (spec.minimum is not None and value < spec.minimum) or (spec.maximum is not None and value > spec.maximum):
        bounds = f"between {spec.minimum:g} and {spec.maximum:g}" if spec.minimum is not None \
            and spec.maximum is not None else (f"at least {spec.minimum:g}" if spec.minimum is not None
                                               else f"at most {spec.maximum:g}")
        raise RecipeError(
            f"`{spec.name}`{whose} is {value}, but it must be {bounds} (tensor {out_name}).",
            why=spec.help,
            hint=f"Set `{spec.name}` to a value {bounds}.",
            key=key,
        )
    return float(value) if spec.kind is ParamKind.FLOAT else value


def _unusual_value_warnings(method: MergeMethod, tasks: list[TensorTask]) -> list[str]:
    """One warning per parameter value outside its `usual` range (merged as given: mergekit computes it)."""
    warnings = []
    for spec in (spec for spec in method.params if spec.usual is not None):
        low, high = spec.usual
        for task in tasks:
            for params in ([task.params] if not spec.per_model else task.model_params):
                value = params.get(spec.name)
                if isinstance(value, (int, float)) and not low <= value <= high:
                    side = "above" if value > high else "below"
                    warnings.append(f"`{spec.name}` {value:g} is {side} the usual {low:g}–{high:g}: {spec.unusual}.")
    return list(dict.fromkeys(warnings))


def _unused_parameter_warnings(recipe: Recipe, method: MergeMethod) -> list[str]:
    known_model = {p.name for p in method.per_model_params}
    known_global = {p.name for p in method.global_params}
    scopes: list[tuple[str, dict[str, Any], bool]] = [("the recipe's parameters", recipe.parameters, False)]
    sources = recipe.models or [s for sl in recipe.slices for s in sl.sources]
    scopes += [(f"{s.model}", s.parameters, True) for s in sources]
    scopes += [(f"slice {i + 1}", sl.parameters, False) for i, sl in enumerate(recipe.slices or [])]
    warnings = []
    for where, scope, per_model in scopes:
        for key in scope:
            if key in known_global and per_model:
                warnings.append(f"`{key}` under {where} is ignored: it applies to the whole merge, set it under "
                                "`parameters:` of the recipe or the slice.")
            elif key not in known_model and key not in known_global:
                warnings.append(_unknown_parameter_warning(key, where, method, known_model | known_global))
    return list(dict.fromkeys(warnings))


def _unknown_parameter_warning(key: str, where: str, method: MergeMethod, known: set[str]) -> str:
    """"density has no effect with linear" for another method's parameter; a "did you mean" for anything else."""
    if any(other.param(key) is not None for other in METHODS.values()):
        return f"`{key}` ({where}) has no effect with {method.name}."
    close = difflib.get_close_matches(key, sorted(known), n=1)
    guess = f' (did you mean "{close[0]}"?)' if close else ""
    return f"`{key}` ({where}) is not a parameter of {method.name} or any other method, so it is ignored{guess}."


def _tokenizer_model(recipe: Recipe, index_of: dict[ModelRef, int]) -> int:
    """The merged model whose vocabulary decides the rows: the source named, else the base (the first model
    without one, as mergekit does). A donor that is not merged lends its tokenizer only (see align_vocabulary)."""
    named = recipe.tokenizer.model if recipe.tokenizer else None
    if named is None or recipe.tokenizer_donor() is not None:
        return index_of[recipe.base_model] if recipe.base_model else 0
    return index_of[named]


def align_vocabulary(plan: MergePlan, folders: list[Path], donor_folder: Path | None = None) -> None:
    """Lay the embedding and output-head tasks out in the output vocabulary the recipe's tokenizer settings give
    (tokenizers.py has the semantics), and record the output tokenizer in `plan.tokenizer_document`.

    `folders` are the merged models' folders (plan order), `donor_folder` the tokenizer donor's. When the base or
    the named source has no tokenizer.json, `base` / a merged model keep the row-by-row alignment of the plan
    (mergekit likewise assumes a model without a tokenizer shares the base's). Raises IncompatibleModelsError
    when `union` or a donor has no tokenizer.json, RecipeError for `tokenizer.tokens` entries that do not fit.
    """
    from guiapp.merging.tokenizers import build_alignment, read_tokenizer  # noqa: PLC0415 - the tokenizers library loads only when a vocabulary is aligned

    settings = plan.recipe.tokenizer
    tasks = [t for t in plan.tasks if t.floating and is_vocabulary_tensor(t.name)]
    if settings is None or not tasks:
        return
    reference = plan.tokenizer_model
    needed = [folders[reference]] + ([donor_folder] if plan.tokenizer_donor is not None else [])
    if settings.source != "union" and plan.tokenizer_donor is None and not settings.tokens \
            and not settings.pad_to_multiple_of and any(read_tokenizer(f) is None for f in needed):
        return
    rows = [next((info.shape[0] for name, info in m.tensors.items() if is_vocabulary_tensor(name)), None)
            for m in plan.models]
    base = plan.config_model if plan.recipe.base_model is not None else None
    alignment, document = build_alignment(settings, [m.ref for m in plan.models], folders, rows, base, donor_folder)
    for task in tasks:
        task.inputs = [TensorInput(i.model, i.tensor) for i in task.inputs]
        task.shape = (alignment.rows, *task.shape[1:])
        task.vocabulary = alignment
    if plan.config is not None and "vocab_size" in plan.config:
        plan.config["vocab_size"] = alignment.rows
    plan.tokenizer_document = document


def compute_dtype_of(method: MergeMethod, read_dtype: torch.dtype | None, config_model: ModelHeaders,
                     exact: torch.dtype, as_recipe: bool) -> torch.dtype:
    """The dtype a merge computes in: `exact` (float32 arithmetic cast once at the end, docs/spec/merge-methods.md,
    "Precision": the more accurate), or with `as_recipe` the recipe's dtype, as mergekit 0.1.5 computes: `dtype`
    when the recipe gives one (`read_dtype`), else the storage dtype of the model the config comes from (mergekit
    computes in the inputs' own dtype then); `exact` still for the methods mergekit computes in float32 whatever the
    dtype (`mergekit_float32`). The second exists to reproduce merges published with mergekit."""
    if as_recipe and not method.mergekit_float32:
        return read_dtype or _storage_dtype(config_model)
    return exact


def _config_model(recipe: Recipe, index_of: dict[ModelRef, int]) -> int:
    return index_of[recipe.base_model] if recipe.base_model is not None else 0


def _storage_dtype(model: ModelHeaders) -> torch.dtype:
    sizes: dict[torch.dtype, int] = {}
    for info in model.tensors.values():
        if info.dtype.is_floating_point:
            sizes[info.dtype] = sizes.get(info.dtype, 0) + info.nbytes
    return max(sizes, key=sizes.get) if sizes else torch.float32


def _output_config(models, config_model, tasks, out_dtype, layer_count, tokenizer_model) -> dict[str, Any] | None:
    config = models[config_model].config
    if config is None:
        config = next((m.config for m in models if m.config is not None), None)
    if config is None:
        return None
    config = dict(config)
    name = dtype_name(out_dtype)
    config["torch_dtype"] = name
    if "dtype" in config:
        config["dtype"] = name
    if layer_count:
        for key in _LAYER_COUNT_KEYS:
            if key in config:
                config[key] = layer_count
                break
    for task in tasks:
        if is_vocabulary_tensor(task.name) and "vocab_size" in config:
            config["vocab_size"] = task.shape[0]
            break
    heads = (tensor_place(t.name, architecture_of(config)).role is TensorRole.HEAD for t in tasks)
    if any(heads) and config.get("tie_word_embeddings"):
        config["tie_word_embeddings"] = False  # the result has its own output head, merged separately
    return config
