"""The Merge page's form and its recipe document kept showing one recipe: an edit of the form is written into the
document (and shown in the YAML view); a document from anywhere else (the YAML view, a sample, Undo, a fix) is
shown in the form. Keys the form has no widget for (dtype, chat_template…) are kept as they are."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject

from guiapp.jobs.recipe_document import FormValues
from guiapp.ui.merge.messages import show_message
from guiapp.ui.text import error_text


class FormSync(QObject):
    """Between a MergePage's boxes and its recipe (`page.recipe`, a RecipeDocument): each change of one is shown in
    the other, then the recipe is checked again."""

    def __init__(self, page: Any) -> None:
        super().__init__(page)
        self.page = page
        self._extra_globals: dict[str, Any] = {}  # method-wide values the schema does not declare, kept as given
        self._syncing = False  # the form is being filled from the document: its change signals write nothing

    # --- form → document --------------------------------------------------------------------------------------

    def method_changed(self) -> None:
        """Describe the method chosen; when the user chose it, show the models and values the form had under its
        fields (the ones it has) and write the recipe."""
        page = self.page
        method = page.method_box.method()
        if method is None:
            return
        page.method_box.describe(method)
        page.models_box.set_base_role(method.base_role.value)
        if self._syncing:
            return
        rows = [(ref, {k: v for k, v in values.items() if v is not None}, extra)
                for ref, values, extra in page.table.entries()]
        page.models_box.show_models(method, rows)
        page.params_box.show_values(method, {k: v for k, v in page.param_form.values().items() if method.param(k)})
        self.form_changed()

    def form_document(self) -> dict[str, Any]:
        """Make the recipe what the form shows (keys the form does not edit are kept) and return it."""
        page = self.page
        method = page.method_box.method()
        wanted = page.document.get("out_dtype")
        page.recipe.apply_form(FormValues(
            merge_method=method.name if method else None,
            base_model=page.base_picker.text(),
            models=page.table.rows(),
            parameters={**self._extra_globals, **page.param_form.values()},
            slices=page.advanced.slices(),
            out_dtype=page.dtype_combo.value(),
            keep_out_dtype=bool(wanted) and not page.dtype_combo.is_enabled_choice(wanted),
            tokenizer_source=page.advanced.tokenizer_source(),
            chat_template=page.advanced.chat_template(),
        ))
        return page.document

    def slices_edited(self, uses_slices: bool) -> None:
        self.page.models_box.use_slices(uses_slices)
        self.form_changed()

    def form_changed(self, *_: Any) -> None:
        """The user changed the form: write the recipe, show it as YAML and check it again."""
        page = self.page
        if self._syncing or not page.methods:
            return
        self.form_document()
        self._show_yaml()
        self.show_dtype_note()
        page.models_box.mark_unused_fields(page.method_box.method())
        page.checker.schedule()

    def show_dtype_note(self) -> None:
        self.page.output.show_dtype_note(self.page.state.probe, self.page.document.get("out_dtype"))

    def _show_yaml(self) -> None:
        self.page.recipe_panel.show_text(self.page.recipe.yaml())

    # --- document → form -------------------------------------------------------------------------------------

    def yaml_edited(self) -> None:
        """The user changed the YAML view: the form follows, or the problem reading it is shown and blocks Run."""
        from guiapp.errors import MergesmithError

        page = self.page
        try:
            warnings = page.recipe.parse_yaml(page.recipe_panel.text())
        except MergesmithError as error:
            show_message(page.yaml_message, error_text(error), "problem")
            page.checker.block_on_yaml_problem(error)
            return
        show_message(page.yaml_message, "\n".join(warnings) or None, "warning")
        self.apply_document(page.document, from_yaml=True)

    def apply_document(self, document: dict[str, Any], from_yaml: bool = False) -> None:
        """Show `document` in the form (and, unless it came from there, in the YAML view)."""
        page = self.page
        page.recipe.replace(document)
        if not page.methods:
            return
        self._syncing = True
        try:
            known = page.method_box.select(document.get("merge_method"))
            method = page.method_box.method()
            view = page.recipe.form_view(method)
            show_message(page.method_message, None if known else
                         f'Unknown merge method "{view.method_name}": choose one from the list.', "problem")
            self.method_changed()  # summary, paper and base label for the shown method
            page.base_picker.set_text(view.base_model, notify=False)
            page.models_box.show_models(method, [(row.reference, row.parameters, row.other) for row in view.rows])
            page.params_box.show_values(method, view.parameters)
            self._extra_globals = view.other_parameters
            page.advanced.show_values(view.slices, view.tokenizer_source, view.chat_template)
            page.table.setEnabled(not view.slices)
            if not page.dtype_combo.select(view.dtype) and view.dtype:
                page.dtype_combo.select(None)
        finally:
            self._syncing = False
        self.show_dtype_note()
        page.models_box.mark_unused_fields(page.method_box.method())
        if not from_yaml:
            self._show_yaml()
        page.checker.schedule()
