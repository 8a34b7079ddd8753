"""Merge recipes: mergekit-compatible YAML read into plain dataclasses, and parameter look-up.

The semantics are those of docs/spec/merge-methods.md §1. Parsing checks the recipe's form (keys, types,
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

from guiapp.errors import KeyPath, RecipeError
from guiapp.facts.dtypes import is_writable_name, writable_name
from guiapp.hub.references import ModelRef
from guiapp.merging.chat_template_names import BUILT_IN_CHAT_TEMPLATES
from guiapp.system.bounded import (
    RECIPE_BYTES,
    check_value_size,
    describe_value,
    parse_yaml_bounded,
    read_text_limited,
)

TOP_LEVEL_KEYS = {
    "merge_method", "models", "slices", "modules", "base_model", "parameters", "dtype", "out_dtype",
    "tokenizer_source", "tokenizer", "chat_template",
}
# The keys mergekit's schema allows at each level of a recipe; anything else is warned about ("did you mean").
_MODEL_ENTRY_KEYS = {"model", "parameters"}
_SOURCE_KEYS = {"model", "layer_range", "parameters"}
_SLICE_KEYS = {"sources", "parameters", "base_model", "residual_weight"}
_MODULE_KEYS = {"models", "slices", "parameters"}
_TOKENIZER_KEYS = {"source", "tokens", "pad_to_multiple_of"}
_TOKEN_KEYS = {"source", "force"}
# The module name mergekit gives the one module of a text-only model.
DEFAULT_MODULE = "default"


@dataclass(frozen=True)
class TokenSource:
    """Where one token's embedding and output-head rows come from (mergekit's `tokenizer.tokens.<t>.source`).

    `kind` is "model" (that token's own row in `model`), "model_token" (the row of `token` or `token_id` in
    `model`), "zero" (zeros) or "average" (the mean of the rows of the models that have the token).
    """

    kind: str
    model: ModelRef | None = None
    token: str | None = None
    token_id: int | None = None


@dataclass(frozen=True)
class TokenOverride:
    """A `tokenizer.tokens` entry: its source (None: the default choice) and whether it replaces every model's row."""

    source: TokenSource | None
    force: bool = False


@dataclass(frozen=True)
class TokenizerSettings:
    """The `tokenizer:` section, or `tokenizer_source:` alone (then `tokens` is empty). `model` is the model
    `source` names, read once (None for `base` and `union`)."""

    source: str
    tokens: dict[str, TokenOverride] = field(default_factory=dict)
    pad_to_multiple_of: int | None = None
    model: ModelRef | None = None


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
    tokenizer: TokenizerSettings | None = None
    chat_template: str | None = None
    # A recipe of several modules (`modules:` with names other than `default`): one recipe per module.
    modules: dict[str, Recipe] | None = None

    def model_refs(self) -> list[ModelRef]:
        """Every model the recipe merges, base included, each once, in order of appearance."""
        refs: list[ModelRef] = []
        if self.modules:
            for module in self.modules.values():
                refs += [ref for ref in module.model_refs() if ref not in refs]
            return refs
        sources = self.models or [s for sl in self.slices or [] for s in sl.sources]
        bases = [self.base_model] + [sl.base_model for sl in self.slices or []]
        for ref in [s.model for s in sources] + [b for b in bases if b is not None]:
            if ref not in refs:
                refs.append(ref)
        return refs

    def tokenizer_donor(self) -> ModelRef | None:
        """The model named by `tokenizer_source` when it is not one of the merged models (only its tokenizer is used)."""
        ref = self.tokenizer.model if self.tokenizer else None
        return None if ref is None or ref in self.model_refs() else ref


def recipe_yaml(document: dict[str, Any]) -> str:
    """A recipe `document` as YAML, keys in its order (what the Merge page shows and a merged model's card
    stores). Raises yaml.representer.RepresenterError for a value YAML cannot write."""
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def load_recipe(path: Path) -> Recipe:
    """Read a recipe file (a regular file of at most `RECIPE_BYTES`).

    Raises RecipeError if it cannot be read, is too large or not text (saying what it seems to be), or is not
    a valid recipe.
    """
    return parse_recipe(read_text_limited(path, RECIPE_BYTES, RecipeError, what="recipe"), label=str(path))


def parse_recipe(text: str, label: str = "The recipe") -> Recipe:
    """Parse recipe YAML (safe loader: YAML tags that construct objects are refused; alias expansion is bounded).

    Raises RecipeError naming the key that is wrong.
    """
    document = parse_yaml_bounded(text, label, RecipeError)
    if not isinstance(document, dict):
        raise RecipeError(f"{label} must be a YAML mapping with at least merge_method and models or slices.")
    return recipe_from_dict(document)


def recipe_from_dict(document: dict[str, Any]) -> Recipe:
    """Build a Recipe from an already-parsed mapping (the window's form uses this). Raises RecipeError.

    Keys mergekit knows but Mergesmith would not apply are refused; keys nobody knows are warned about,
    with the closest known key when there is one.
    """
    check_value_size(document, "The recipe", RecipeError)
    warnings: list[str] = []
    _warn_unknown_keys(document, TOP_LEVEL_KEYS, "the recipe", warnings)
    method = document.get("merge_method")
    if not isinstance(method, str) or not method:
        raise RecipeError(
            "The recipe has no merge_method.",
            why="The merge method decides how the models' weights are combined; there is no default.",
            hint="Add a line such as `merge_method: ties`.",
            key="merge_method",
        )
    if _is_multi_module(document):
        return _multi_module_recipe(document, warnings)
    document_parts = _unwrap_default_module(document, warnings)
    has_models, has_slices = "models" in document_parts, "slices" in document_parts
    if has_models == has_slices:
        raise RecipeError(
            "The recipe needs exactly one of `models:` or `slices:`"
            + (" (it has both)." if has_models else " (it has neither)."),
            why="`models:` merges whole models and `slices:` picks layer ranges; the two cannot be combined.",
            hint="Keep `models:` to merge whole models, or `slices:` to choose layer ranges.",
            key="slices" if has_slices else "models",
        )
    tokenizer = _tokenizer_settings(document)
    chat_template = _chat_template(document.get("chat_template"))

    base = ModelRef.parse(document["base_model"], "base_model") if document.get("base_model") else None
    parameters = _merged_scopes(_mapping(document_parts.get("module_parameters"), "modules.default.parameters"),
                                _mapping(document.get("parameters"), "parameters"))
    models = slices = None
    if has_models:
        entries = document_parts["models"]
        if not isinstance(entries, list) or not entries:
            raise RecipeError("`models:` must be a non-empty list of `- model: …` entries.",
                              why="There is nothing to merge without at least one model.",
                              hint="Add entries such as `- model: org/name`.", key="models")
        models = [_source(entry, f"models[{i}]", allow_range=False, warnings=warnings) for i, entry in enumerate(entries)]
    else:
        entries = document_parts["slices"]
        if not isinstance(entries, list) or not entries:
            raise RecipeError("`slices:` must be a non-empty list of `- sources: […]` entries.",
                              why="Each slice says which layers of which models make up part of the result.",
                              hint="Add entries such as `- sources: [{model: org/name, layer_range: [0, 16]}]`.",
                              key="slices")
        slices = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("sources"), list) or not entry["sources"]:
                raise RecipeError(f"slices[{i}] needs a non-empty `sources:` list.",
                                  why="A slice without sources contributes no layers.",
                                  hint="Give it `sources:` with `model:` and `layer_range:` entries.", key=("slices", i))
            _warn_unknown_keys(entry, _SLICE_KEYS, f"slices[{i}]", warnings)
            if "residual_weight" in entry:
                warnings.append(f"`residual_weight` (slices[{i}]) is ignored: no merge method uses it, "
                                "in mergekit or in Mergesmith.")
            sources = [_source(s, f"slices[{i}].sources[{j}]", allow_range=True, warnings=warnings)
                       for j, s in enumerate(entry["sources"])]
            slice_base = ModelRef.parse(entry["base_model"], ("slices", i, "base_model")) if entry.get("base_model") else None
            slices.append(Slice(sources, _mapping(entry.get("parameters"), f"slices[{i}].parameters"), slice_base))
    dtype, out_dtype = document.get("dtype"), document.get("out_dtype")
    for key, value in (("dtype", dtype), ("out_dtype", out_dtype)):
        if value is not None and not is_writable_name(value):
            raise RecipeError(
                f'`{key}: {value}` is not a dtype Mergesmith can use.',
                why="Weights are stored as floating-point numbers of one of four widths.",
                hint="Use bfloat16, float16, float32 or float64.",
                key=key,
            )
    return Recipe(
        merge_method=method,
        models=models,
        slices=slices,
        base_model=base,
        parameters=parameters,
        dtype=None if dtype is None else writable_name(dtype),
        out_dtype=None if out_dtype is None else writable_name(out_dtype),
        tokenizer_source=tokenizer.source if tokenizer else None,
        document=document,
        warnings=warnings,
        tokenizer=tokenizer,
        chat_template=chat_template,
    )


def _warn_unknown_keys(mapping: dict[str, Any], known: set[str], where: str, warnings: list[str]) -> None:
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            guess = f' (did you mean "{close[0]}"?)' if close else ""
            warnings.append(f'Unknown key "{key}" in {where} is ignored{guess}.')


def _checked_modules(document: dict[str, Any]) -> dict[str, Any] | None:
    """The `modules:` mapping (None without one), each module checked to be a mapping. Raises RecipeError."""
    if "modules" not in document:
        return None
    modules = document["modules"]
    if "models" in document or "slices" in document:
        raise RecipeError(
            "The recipe has `modules:` and also `models:` or `slices:`.",
            why="`modules:` already says what to merge, module by module; the two would contradict each other.",
            hint="Keep only `modules:`, or move its content to the top level and remove `modules:`.",
            key="modules",
        )
    if not isinstance(modules, dict) or not modules:
        raise RecipeError("`modules:` must map module names to `models:` or `slices:`.",
                          why="Each module of the model is merged from its own list.",
                          hint="For a text-only model write `modules: {default: {slices: […]}}`, or use `slices:`.",
                          key="modules")
    for name, module in modules.items():
        if not isinstance(module, dict):
            raise RecipeError(f"`modules.{name}` must hold `models:` or `slices:`.",
                              why="The module says what to merge.", hint=f"Write `{name}: {{slices: […]}}`.",
                              key=("modules", name))
    return modules


def _is_multi_module(document: dict[str, Any]) -> bool:
    modules = _checked_modules(document)
    return modules is not None and set(modules) != {DEFAULT_MODULE}


def _unwrap_default_module(document: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """`models:`/`slices:` of the recipe, taken from `modules: {default: …}` when the recipe uses that form
    (mergekit's form for a text-only model: one module)."""
    modules = _checked_modules(document)
    if modules is None:
        return {key: document[key] for key in ("models", "slices") if key in document}
    module = modules[DEFAULT_MODULE]
    _warn_unknown_keys(module, _MODULE_KEYS, f"modules.{DEFAULT_MODULE}", warnings)
    parts = {key: module[key] for key in ("models", "slices") if key in module}
    if "parameters" in module:
        parts["module_parameters"] = module["parameters"]
    return parts


def _multi_module_recipe(document: dict[str, Any], warnings: list[str]) -> Recipe:
    """A recipe of several modules (a vision-language model's language model, vision tower, projector…): each
    module becomes a recipe of its own (the recipe's method, base model and dtypes, its parameters over the
    recipe's); the plan merges each module's tensors with it and copies the tensors no module names."""
    if document.get("tokenizer") is not None or document.get("tokenizer_source") is not None:
        raise RecipeError(
            "Tokenizer settings in a recipe of several modules are not supported yet.",
            why="The vocabulary belongs to one module (the language model), and Mergesmith does not yet tell "
            "which one from the recipe.",
            hint="Remove `tokenizer`/`tokenizer_source` (the base model's tokenizer is copied), or merge the "
            "language model alone with `slices:`.",
            key="tokenizer" if document.get("tokenizer") is not None else "tokenizer_source",
        )
    shared = {key: document[key] for key in ("merge_method", "base_model", "dtype", "out_dtype") if key in document}
    modules = {}
    for name, module in document["modules"].items():
        _warn_unknown_keys(module, _MODULE_KEYS, f"modules.{name}", warnings)
        sub_document = {**shared, **{key: module[key] for key in ("models", "slices") if key in module}}
        sub_document["parameters"] = _merged_scopes(_mapping(module.get("parameters"), f"modules.{name}.parameters"),
                                                    _mapping(document.get("parameters"), "parameters"))
        sub_recipe = recipe_from_dict(sub_document)
        warnings += [f"modules.{name}: {warning}" for warning in sub_recipe.warnings]
        modules[str(name)] = sub_recipe
    first = next(iter(modules.values()))
    return Recipe(
        merge_method=first.merge_method, models=None, slices=None, base_model=first.base_model,
        parameters=_mapping(document.get("parameters"), "parameters"), dtype=first.dtype, out_dtype=first.out_dtype,
        tokenizer_source=None, document=document, warnings=warnings,
        chat_template=_chat_template(document.get("chat_template")), modules=modules,
    )


def _merged_scopes(inner: dict[str, Any], outer: dict[str, Any]) -> dict[str, Any]:
    """One parameter scope that looks in `inner` first and falls through to `outer` when no filter of `inner`
    matches, exactly as two scopes would (used for a module's parameters above the recipe's)."""
    merged = dict(outer)
    for name, value in inner.items():
        merged[name] = _as_conditions(value) + _as_conditions(outer[name]) if name in outer else value
    return merged


def _as_conditions(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and value and all(isinstance(entry, dict) for entry in value):
        return list(value)
    return [{"value": value}]


def _tokenizer_settings(document: dict[str, Any]) -> TokenizerSettings | None:
    """The `tokenizer:` section or `tokenizer_source:`. Raises RecipeError for a form mergekit would refuse too."""
    if "tokenizer" in document and "tokenizer_source" in document:
        raise RecipeError(
            "The recipe sets both `tokenizer` and `tokenizer_source`.",
            why="Both say which vocabulary the result has; with two answers neither can be chosen.",
            hint="Keep only one of them (`tokenizer:` can hold `source:`).",
            key="tokenizer",
        )
    if document.get("tokenizer_source") is not None:
        source, model = _tokenizer_source(document["tokenizer_source"], "tokenizer_source")
        return TokenizerSettings(source, model=model)
    section = document.get("tokenizer")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise RecipeError("`tokenizer:` must be a mapping with `source:` (and optionally `tokens:`).",
                          why="It describes the result's vocabulary and where new tokens' rows come from.",
                          hint="For example `tokenizer: {source: union}`.", key="tokenizer")
    warnings: list[str] = []
    _warn_unknown_keys(section, _TOKENIZER_KEYS, "tokenizer", warnings)
    if warnings:
        raise RecipeError(warnings[0].replace("is ignored", "is not a tokenizer setting"),
                          why="A tokenizer setting Mergesmith does not know would change the vocabulary in a way "
                          "it cannot apply.", hint="Use only `source`, `tokens` and `pad_to_multiple_of`.",
                          key="tokenizer")
    source, model = _tokenizer_source(section.get("source", "union"), "tokenizer.source")  # mergekit's default
    pad = section.get("pad_to_multiple_of")
    if pad is not None and (as_number(pad) is None or float(as_number(pad)) != int(as_number(pad)) or as_number(pad) < 1):
        raise RecipeError(f"`tokenizer.pad_to_multiple_of` must be a whole number of at least 1, got {describe_value(pad)}.",
                          why="The embedding rows are padded up to a multiple of it.",
                          hint="For example `pad_to_multiple_of: 64`, or remove it.",
                          key=("tokenizer", "pad_to_multiple_of"))
    tokens = section.get("tokens") or {}
    if not isinstance(tokens, dict):
        raise RecipeError("`tokenizer.tokens` must map token texts to settings.",
                          why="Each entry says where one token's embedding comes from.",
                          hint='For example `tokens: {"<|im_start|>": {source: org/name}}`.',
                          key=("tokenizer", "tokens"))
    return TokenizerSettings(
        source,
        {str(token): _token_override(str(token), value) for token, value in tokens.items()},
        int(as_number(pad)) if pad is not None else None,
        model,
    )


def _tokenizer_source(value: Any, key: str) -> tuple[str, ModelRef | None]:
    """The source's text and the model it names (None for `base` and `union`). Raises RecipeError with `key` for
    anything else that is not a model reference."""
    if isinstance(value, dict) and "model" in value:
        model = ModelRef.parse(value, key)
        return str(model), model
    if not isinstance(value, str) or not value.strip():
        raise RecipeError(f"`{key}` must be `base`, `union` or a model, got {describe_value(value)}.",
                          why="It names the vocabulary the result uses.",
                          hint=f"For example `{key}: base`.", key=key)
    text = value.strip()
    return text, None if text in ("base", "union") else ModelRef.parse(text, key)


def _token_override(token: str, value: Any) -> TokenOverride:
    where = f'tokenizer.tokens["{token}"]'
    key = ("tokenizer", "tokens", token)
    if not isinstance(value, dict):
        raise RecipeError(f"{where} must be a mapping with `source:` (and optionally `force:`).",
                          why="It says where this token's embedding row comes from.",
                          hint="For example `source: org/name`, or `source: {kind: zero}`.", key=key)
    warnings: list[str] = []
    _warn_unknown_keys(value, _TOKEN_KEYS, where, warnings)
    if warnings:
        raise RecipeError(warnings[0].replace("is ignored", "is not a token setting"),
                          why="An unknown token setting would leave this token's row other than the recipe says.",
                          hint="Use only `source` and `force`.", key=key)
    force = value.get("force", False)
    if not isinstance(force, bool):
        raise RecipeError(f"{where}.force must be true or false, got {describe_value(force)}.", why="It is a switch.",
                          hint="Write `force: true` or remove it.", key=(*key, "force"))
    source = value.get("source")
    if source is None and force:
        raise RecipeError(f"{where} has `force: true` but no `source:`.",
                          why="Forcing replaces every model's row of this token with the source's, so it needs one.",
                          hint="Add `source:` (a model, `{kind: zero}` or `{kind: average}`), or remove `force`.",
                          key=key)
    if source is None:
        return TokenOverride(None, force)
    if isinstance(source, str):
        return TokenOverride(TokenSource("model", ModelRef.parse(source, (*key, "source"))), force)
    if not isinstance(source, dict):
        raise RecipeError(f"{where}.source must be a model or a mapping with `kind:`, got {describe_value(source)}.",
                          why="It says which row to take.", hint="For example `source: org/name`.",
                          key=(*key, "source"))
    kind = source.get("kind")
    if kind == "zero":
        return TokenOverride(TokenSource("zero"), force)
    if kind == "average":
        return TokenOverride(TokenSource("average"), force)
    if kind == "model_token":
        token_text, token_id = source.get("token"), source.get("token_id")
        if (token_text is None) == (token_id is None) or "model" not in source:
            raise RecipeError(f"{where}.source (kind: model_token) needs `model:` and one of `token:` or `token_id:`.",
                              why="It copies the row of one token of one model.",
                              hint="For example `{kind: model_token, model: org/name, token: <s>}`.",
                              key=(*key, "source"))
        if token_id is not None and (isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0):
            raise RecipeError(f"{where}.source.token_id must be a row number, got {describe_value(token_id)}.",
                              why="It indexes the model's embedding rows.", hint="Use `token:` with the token's text.",
                              key=(*key, "source", "token_id"))
        return TokenOverride(TokenSource("model_token", ModelRef.parse(source["model"], (*key, "source", "model")),
                                         None if token_text is None else str(token_text), token_id), force)
    if "model" in source and kind is None:
        return TokenOverride(TokenSource("model", ModelRef.parse(source, (*key, "source"))), force)
    raise RecipeError(f"{where}.source has kind {describe_value(kind)}, which is not one Mergesmith knows.",
                      why="The kind says how the row is made.",
                      hint="Use `model_token`, `zero` or `average`, or name a model.", key=(*key, "source", "kind"))


def _chat_template(value: Any) -> str | None:
    """The chat template the recipe asks for: None, `auto`, a built-in name, or Jinja text (checked as mergekit
    does: a name that is not built in must look like a template). Raises RecipeError otherwise."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise RecipeError(f"`chat_template` must be a name or a Jinja template, got {describe_value(value)}.",
                          why="It is written into the result's tokenizer settings.",
                          hint=f"Use auto, {', '.join(BUILT_IN_CHAT_TEMPLATES)}, or the template text.",
                          key="chat_template")
    if value == "auto" or value in BUILT_IN_CHAT_TEMPLATES or ("{" in value and len(value) >= 20):
        return value
    close = difflib.get_close_matches(value, ["auto", *BUILT_IN_CHAT_TEMPLATES], n=1)
    raise RecipeError(
        f'`chat_template: {value}` is neither a built-in template nor a Jinja template'
        + (f' (did you mean "{close[0]}"?).' if close else "."),
        why="Chat templates are Jinja text with `{{ … }}` and `{% … %}` blocks; a short word can only be a name.",
        hint=f"Use auto (the inputs' most common template), {', '.join(BUILT_IN_CHAT_TEMPLATES)}, "
        "or paste the template text.",
        key="chat_template",
    )


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecipeError(f"`{where}` must be a mapping of parameter names to values.",
                          why="Parameters are looked up by name.", hint="For example `parameters: {weight: 0.5}`.",
                          key=where)
    return dict(value)


def _source(entry: Any, where: str, allow_range: bool, warnings: list[str]) -> Source:
    if not isinstance(entry, dict) or "model" not in entry:
        raise RecipeError(f"{where} needs a `model:` entry.", why="Each entry names one model to merge.",
                          hint="Each entry looks like `- model: org/name`.", key=where)
    _warn_unknown_keys(entry, _SOURCE_KEYS if allow_range else _MODEL_ENTRY_KEYS | {"layer_range"}, where, warnings)
    layer_range = None
    if "layer_range" in entry:
        if not allow_range:
            raise RecipeError(f"{where} has a layer_range; layer ranges belong in `slices:` sources.",
                              why="`models:` always merges whole models, so a layer range there would be ignored.",
                              hint="Remove layer_range, or write the recipe with `slices:`.", key=where)
        value = entry["layer_range"]
        if (
            not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or value[0] < 0 or value[1] <= value[0]
        ):
            raise RecipeError(
                f"{where}.layer_range must be [start, end) with 0 ≤ start < end, got {describe_value(value)}.",
                why="It names the first layer taken and the layer after the last one, so end must be above start.",
                hint="For example `layer_range: [0, 16]` takes layers 0 to 15.",
                key=f"{where}.layer_range",
            )
        layer_range = (value[0], value[1])
    return Source(ModelRef.parse(entry["model"], f"{where}.model"), layer_range, _mapping(entry.get("parameters"), f"{where}.parameters"))


# --- parameter values ---------------------------------------------------------------------------------------

_MISSING = object()


def as_number(value: Any) -> int | float | None:
    """`value` as a number: numbers as they are, and text that spells one (YAML 1.1 reads `1e-5`, with no dot
    before the exponent, as a string; mergekit accepts it, so Mergesmith does too). None for anything else,
    including NaN and infinities (`.nan`, `.inf`), which no parameter can use."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
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


def evaluate(value: Any, tensor_name: str, t: float, key: KeyPath = ()) -> Any:
    """The value a recipe parameter takes for `tensor_name` at gradient position `t`, or `_MISSING`.

    Forms: a scalar; a list of numbers (a gradient, interpolated); a list of booleans or strings (stepped);
    `{filter, value}` or a list of them (first filter that is a substring of the name wins; `*` or no filter
    matches everything). Raises RecipeError with `key` (the parameter's place in the recipe) for a form it does
    not know.
    """
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        if not value:
            raise RecipeError("A parameter is an empty list.", hint="Give a number, or a list of numbers for a gradient.",
                              key=key)
        if all(isinstance(entry, dict) for entry in value):
            for entry in value:
                if "value" not in entry:
                    raise RecipeError(f"The filtered parameter entry {describe_value(entry)} has no `value`.",
                                      hint="Write each entry as `{filter: mlp, value: 0.5}`.", key=key)
                pattern = entry.get("filter")
                if pattern is None or pattern == "*" or str(pattern) in tensor_name:
                    return evaluate(entry["value"], tensor_name, t, key)
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
        unusable = [v for v in value if isinstance(v, float) and not math.isfinite(v)]
        if unusable:
            raise RecipeError(f"The gradient {describe_value(value)} holds {describe_value(unusable[0])}, which is not "
                              "a number a parameter can take.",
                              hint="Use only finite numbers in a gradient: NaN or infinity would break the model.",
                              key=key)
        raise RecipeError(f"The parameter value {describe_value(value)} mixes kinds of values.",
                          hint="Use only numbers in a gradient.", key=key)
    return value


def lookup(scopes: list[dict[str, Any]], name: str, tensor_name: str, t: float, key: KeyPath = ()) -> Any:
    """Look `name` up in `scopes` (most specific first); returns `_MISSING` when no scope gives a value. Raises
    `evaluate`'s RecipeError, with `key`, for a value of a form it does not know."""
    for scope in scopes:
        if name in scope:
            found = evaluate(scope[name], tensor_name, t, key)
            if found is not _MISSING:
                return found
    return _MISSING


def is_missing(value: Any) -> bool:
    return value is _MISSING
