"""The recipe being edited, as one plain mapping (exactly what the YAML shows), with undo. No Qt.

The Merge page's form and its YAML view are two views of a `RecipeDocument`: edits from either side go through
it, and it decides what the other side shows. Keys the form has no field for (dtype, chat_template…) are kept as
they are; a recipe listing its models under `modules:` keeps them there when the form edits the rest.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from guiapp.errors import RecipeError
from guiapp.system.bounded import parse_yaml_bounded

if TYPE_CHECKING:
    from guiapp.merging.recipe import Recipe

# The keys the form edits; every other key of a document is kept as it is.
FORM_KEYS = ("merge_method", "base_model", "models", "slices", "parameters", "out_dtype", "tokenizer_source",
             "chat_template")
MAX_UNDO = 100


@dataclass
class FormModel:
    """One row of the form's model list: the reference and its parameters (those the form shows and any other)."""

    model: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class FormValues:
    """Everything the form shows. `slices` is the slices text's parsed value (None when empty; the text itself
    when it is not valid YAML, so the check reports it); `out_dtype` None means "same as the models"."""

    merge_method: str | None
    base_model: str = ""
    models: list[FormModel] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    slices: Any = None
    out_dtype: str | None = None
    keep_out_dtype: bool = False  # the document's out_dtype cannot be chosen here: keep it so its problem shows
    tokenizer_source: str = ""
    chat_template: str = ""  # "" leaves it out: the tokenizer files are copied as they are


@dataclass(frozen=True)
class ModelRow:
    """A row of the form's model table: the reference, the method's per-model parameters, and any other parameters
    the entry holds (kept, and marked as unused by this method)."""

    reference: str
    parameters: dict[str, Any]
    other: dict[str, Any]


@dataclass(frozen=True)
class FormView:
    """What the form shows of a document for a method: each value in the field that edits it."""

    method_name: Any
    base_model: str
    parameters: dict[str, Any]  # the method's global parameters
    other_parameters: dict[str, Any]  # global parameters this method does not take (kept, not shown)
    rows: list[ModelRow]
    slices: Any
    tokenizer_source: str
    chat_template: str
    dtype: Any  # out_dtype, else dtype; None when neither


class RecipeDocument:
    """A recipe document with undo and redo. Every change makes one undo step (unless it changes nothing)."""

    def __init__(self, document: dict[str, Any] | None = None) -> None:
        self._document: dict[str, Any] = copy.deepcopy(document or {})
        self._undo: list[dict[str, Any]] = []
        self._redo: list[dict[str, Any]] = []

    # --- reading --------------------------------------------------------------------------------------------

    @property
    def data(self) -> dict[str, Any]:
        """The document itself (do not change it in place: use the methods, so undo sees the change)."""
        return self._document

    def copy(self) -> dict[str, Any]:
        """A deep copy, safe to hand to another thread."""
        return copy.deepcopy(self._document)

    def yaml(self) -> str:
        """The document as the YAML view shows it and a merged model's card stores it (keys in its order)."""
        from guiapp.merging.recipe import recipe_yaml

        return recipe_yaml(self._document)

    def models(self) -> list[FormModel]:
        """The models the form lists (none when they are given by slices or modules)."""
        entries = self._document.get("models")
        if not isinstance(entries, list):
            return []
        rows = []
        for entry in entries:
            if isinstance(entry, dict):
                parameters = entry.get("parameters")
                rows.append(FormModel(str(entry.get("model", "")), dict(parameters) if isinstance(parameters, dict) else {}))
            else:
                rows.append(FormModel(str(entry)))
        return rows

    def form_view(self, method: Any) -> FormView:
        """The document as the form shows it with `method` (a merge method declaration) chosen: which values go in
        the method's fields, which are kept aside as unused."""
        document = self._document
        parameters = document.get("parameters")
        parameters = dict(parameters) if isinstance(parameters, dict) else {}
        per_model = {spec.name for spec in method.per_model_params}
        rows = []
        for entry in document.get("models") or []:
            values = entry.get("parameters") if isinstance(entry, dict) else None
            values = dict(values) if isinstance(values, dict) else {}
            rows.append(ModelRow(str(entry.get("model", "")) if isinstance(entry, dict) else str(entry),
                                 {k: v for k, v in values.items() if k in per_model},
                                 {k: v for k, v in values.items() if k not in per_model}))
        takes = {k for k in parameters if method.param(k) and not method.param(k).per_model}
        return FormView(
            method_name=document.get("merge_method"),
            base_model=str(document.get("base_model") or ""),
            parameters={k: v for k, v in parameters.items() if k in takes},
            other_parameters={k: v for k, v in parameters.items() if k not in takes},
            rows=rows,
            slices=document.get("slices"),
            tokenizer_source=str(document.get("tokenizer_source") or ""),
            chat_template=str(document.get("chat_template") or ""),
            dtype=document.get("out_dtype") or document.get("dtype"),
        )

    def to_recipe(self) -> Recipe:
        """The document as a Recipe a job can run (a copy: later edits do not change it). Raises RecipeError."""
        from guiapp.merging.recipe import recipe_from_dict

        return recipe_from_dict(self.copy())

    def has_inputs(self) -> bool:
        """Whether anything names models to merge (so there is something to check)."""
        return any(self._document.get(key) for key in ("models", "slices", "modules"))

    # --- changing ---------------------------------------------------------------------------------------------

    def replace(self, document: dict[str, Any]) -> None:
        """Make `document` the recipe (an import, a sample, a page of the YAML view)."""
        self._change(copy.deepcopy(document))

    def parse_yaml(self, text: str, label: str = "The recipe") -> list[str]:
        """Make the YAML `text` the recipe, if it is a valid one; returns its warnings (unknown keys…).

        Raises RecipeError, naming the key at fault, and leaves the document as it was, when it is not.
        """
        from guiapp.merging.recipe import parse_recipe

        recipe = parse_recipe(text, label=label)
        self._change(copy.deepcopy(recipe.document))
        return list(recipe.warnings)

    @staticmethod
    def written_mapping(text: str) -> dict[str, Any] | None:
        """The mapping the YAML `text` holds even when it is not a valid recipe (a one-click fix is offered on it);
        None when the text is not YAML, or not a mapping."""
        from guiapp.errors import MergesmithError

        try:
            written = parse_yaml_bounded(text, "The recipe", RecipeError)
        except MergesmithError:
            return None
        return written if isinstance(written, dict) else None

    def set_method(self, name: str) -> None:
        self._edit({"merge_method": name})

    def set_base(self, reference: str | None) -> None:
        self._edit({"base_model": reference or None})

    def set_parameter(self, name: str, value: Any, model: int | None = None) -> None:
        """Set the method parameter `name` for the whole recipe, or for the `model`-th model; None removes it."""
        document = copy.deepcopy(self._document)
        if model is None:
            scope = document.setdefault("parameters", {})
        else:
            entries = document.get("models") or []
            if not 0 <= model < len(entries):
                raise RecipeError(f"There is no model number {model + 1} in the recipe.", key=("models", model))
            if not isinstance(entries[model], dict):
                entries[model] = {"model": str(entries[model])}
            scope = entries[model].setdefault("parameters", {})
        if value is None:
            scope.pop(name, None)
        else:
            scope[name] = value
        self._change(_without_empty_parameters(document))

    def add_model(self, reference: str, parameters: dict[str, Any] | None = None) -> int:
        """Append a model to `models:` (with `parameters`); returns its index."""
        document = copy.deepcopy(self._document)
        entry: dict[str, Any] = {"model": reference}
        if parameters:
            entry["parameters"] = dict(parameters)
        document.setdefault("models", []).append(entry)
        self._change(document)
        return len(document["models"]) - 1

    def apply_form(self, form: FormValues) -> None:
        """Make the recipe what the form shows, keeping the keys the form has no field for."""
        document: dict[str, Any] = {"merge_method": form.merge_method or self._document.get("merge_method")}
        if form.base_model:
            document["base_model"] = form.base_model
        # A recipe listing its models under `modules:` keeps them there (the form has no fields for modules).
        listed_in_modules = bool(self._document.get("modules")) and form.slices is None and not form.models
        if form.slices is not None:
            document["slices"] = form.slices
        elif not listed_in_modules:
            document["models"] = [{"model": row.model, **({"parameters": dict(row.parameters)} if row.parameters else {})}
                                  for row in form.models]
        if form.parameters:
            document["parameters"] = dict(form.parameters)
        if form.out_dtype:
            document["out_dtype"] = form.out_dtype
        elif form.keep_out_dtype and self._document.get("out_dtype"):
            document["out_dtype"] = self._document["out_dtype"]
        if form.tokenizer_source.strip():
            document["tokenizer_source"] = form.tokenizer_source.strip()
        if form.chat_template.strip():
            document["chat_template"] = form.chat_template
        document.update({k: v for k, v in self._document.items() if k not in FORM_KEYS})
        self._change(document)

    # --- undo ---------------------------------------------------------------------------------------------------

    def undo(self) -> bool:
        """Go back one change; False when there is none."""
        if not self._undo:
            return False
        self._redo.append(self._document)
        self._document = self._undo.pop()
        return True

    def redo(self) -> bool:
        """Make the last undone change again; False when there is none."""
        if not self._redo:
            return False
        self._undo.append(self._document)
        self._document = self._redo.pop()
        return True

    def _edit(self, values: dict[str, Any]) -> None:
        document = copy.deepcopy(self._document)
        for key, value in values.items():
            if value is None:
                document.pop(key, None)
            else:
                document[key] = value
        self._change(document)

    def _change(self, document: dict[str, Any]) -> None:
        if document == self._document:
            return
        self._undo.append(self._document)
        del self._undo[:-MAX_UNDO]
        self._redo.clear()
        self._document = document


def parse_slices(text: str) -> Any:
    """The slices text of the form as a value: None when empty, the text itself when it is not valid YAML (the
    recipe check then reports it next to the slices)."""
    if not text.strip():
        return None
    try:
        return parse_yaml_bounded(text, "The slices", RecipeError)
    except RecipeError:
        return text


def _without_empty_parameters(document: dict[str, Any]) -> dict[str, Any]:
    if document.get("parameters") == {}:
        del document["parameters"]
    for entry in document.get("models") or []:
        if isinstance(entry, dict) and entry.get("parameters") == {}:
            del entry["parameters"]
    return document
