"""The Merge page: a form built from the method registry, a live mergekit-compatible YAML view, validation
next to the fields it concerns, the estimate and the compatibility verdict, and Run.

The recipe document (`guiapp.jobs.recipe_document.RecipeDocument`: a plain mapping, exactly what the YAML shows,
with undo; no Qt) is the page's state. The form writes into it and the YAML view shows it; editing the YAML
replaces it and the form follows. Keys the form has no widget for
(dtype, chat_template…) are kept as they are. The check (`guiapp.jobs.validation.check_merge`, headers only)
runs on a worker thread, debounced, and only the newest answer is shown: each problem next to the field its key
names.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QGroupBox,
    QLabel,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.fixes import window_text
from guiapp.jobs.recipe_document import FormValues, RecipeDocument
from guiapp.jobs.recipe_fixes import fix_for
from guiapp.jobs.validation import check_merge, free_output
from guiapp.system.paths import expanded
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.merge.advanced_box import AdvancedBox
from guiapp.ui.merge.messages import show_message
from guiapp.ui.merge.method_box import MethodBox
from guiapp.ui.merge.models_box import ModelsBox
from guiapp.ui.merge.output_box import OutputBox, default_output_folder
from guiapp.ui.merge.problem_control import control_for, point_at
from guiapp.ui.merge.recipe_panel import RecipePanel
from guiapp.ui.merge.run_box import RunBox
from guiapp.ui.text import error_text
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets import layer_chart
from guiapp.ui.widgets.param_form import ParamForm
from guiapp.ui.widgets.wrapping_label import WrappingLabel

VALIDATION_DELAY_MS = 500


# Which message label shows a problem, by the first part of its key (anything else goes next to the models).
FIELD_OF_KEY = {"merge_method": "method", "base_model": "base", "models": "models", "parameters": "params",
                "slices": "slices", "modules": "slices", "output": "output", "out_dtype": "output", "dtype": "output"}


class MergePage(QWidget):
    job_submitted = Signal(str)

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.methods: dict[str, Any] = {}
        self.recipe = RecipeDocument()  # the page's state: what the YAML view shows and the form edits
        self._extra_globals: dict[str, Any] = {}  # method-wide values the schema does not declare, kept as given
        self._syncing = False
        self._validator = LatestTask(VALIDATION_DELAY_MS, self)
        # The problem blocking Run (its key and text: the check's first error, or the YAML view's own) and its
        # one-click fix: a guiapp.jobs.recipe_fixes.RecipeFix with the document that fix applies to, or a free
        # output folder when the chosen one is taken.
        self._problem: tuple[Any, str] | None = None
        self._fix: Any = None
        self._fix_document: dict[str, Any] = {}
        self._free_output: str | None = None
        layer_chart.install()  # a list across the layers is drawn under its editor, its points draggable

        self.stack = QStackedWidget()
        self.loading = WrappingLabel("Loading the merge methods…", alignment=Qt.AlignmentFlag.AlignCenter)
        self.stack.addWidget(self.loading)
        self.stack.addWidget(self._build_editor())
        layout = QVBoxLayout(self)
        layout.addWidget(self.stack)
        for picker in (self.base_picker, self.add_model_picker):
            picker.use_library(state.library)
        state.methods_ready.connect(self.set_methods)
        state.methods_failed.connect(self._engine_failed)
        state.probe_ready.connect(lambda _: self._refresh_capabilities())
        state.checks_outdated.connect(self.recheck)
        if state.methods is not None:
            self.set_methods(state.methods)

    # --- building --------------------------------------------------------------------------------------------

    def _build_editor(self) -> QWidget:
        form = QWidget()
        column = QVBoxLayout(form)

        self.method_box = MethodBox()
        self.method_box.method_combo.currentIndexChanged.connect(self._method_changed)
        self.method_combo, self.method_message = self.method_box.method_combo, self.method_box.method_message
        column.addWidget(self.method_box)

        self.models_box = ModelsBox()
        self.models_box.changed.connect(self._form_changed)
        self.models_box.add_requested.connect(self.add_model)
        box = self.models_box
        self.base_picker, self.base_message, self.table = box.base_picker, box.base_message, box.table
        self.add_model_picker, self.add_model_button = box.add_model_picker, box.add_model_button
        self.models_message, self.compatibility = box.models_message, box.compatibility
        column.addWidget(box)

        params_box = QGroupBox("Method parameters")
        params_layout = QVBoxLayout(params_box)
        self.param_form = ParamForm()
        self.param_form.changed.connect(self._form_changed)
        self.params_message = WrappingLabel(visible=False)
        params_layout.addWidget(self.param_form)
        params_layout.addWidget(self.params_message)
        column.addWidget(params_box)

        self.advanced = AdvancedBox()
        self.advanced.changed.connect(self._form_changed)
        self.advanced.slices_changed.connect(self._slices_edited)
        self.slices_edit, self.slices_message = self.advanced.slices_edit, self.advanced.slices_message
        column.addWidget(self.advanced)

        self.output = OutputBox()
        self.output.device_changed.connect(self._device_changed)
        self.output.dtype_changed.connect(self._form_changed)
        self.output.folder_changed.connect(self._schedule_validation)
        self.device_combo, self.dtype_combo = self.output.device_combo, self.output.dtype_combo
        self.output_edit, self.overwrite_check = self.output.output_edit, self.output.overwrite_check
        self.output_message, self.dtype_note = self.output.output_message, self.output.dtype_note
        column.addWidget(self.output)

        self.run_box = RunBox()
        self.run_box.run_button.clicked.connect(self.run)
        self.run_box.action_bar.show_button.clicked.connect(self.show_problem)
        self.run_box.action_bar.fix_button.clicked.connect(self.fix_problem)
        self.estimate, self.fit_label = self.run_box.estimate, self.run_box.fit_label
        self.run_button, self.run_message = self.run_box.run_button, self.run_box.run_message
        column.addWidget(self.run_box)
        column.addStretch()

        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(form)

        self.recipe_panel = RecipePanel()
        self.recipe_panel.edited.connect(self._yaml_edited)
        self.yaml_edit, self.yaml_message = self.recipe_panel.yaml_edit, self.recipe_panel.yaml_message
        self.import_recipe, self.export_recipe = self.recipe_panel.import_recipe, self.recipe_panel.export_recipe

        splitter = QSplitter()
        splitter.addWidget(scroll)
        splitter.addWidget(self.recipe_panel)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setSizes([700, 420])
        self.splitter = splitter
        editor = QWidget()  # the action bar below the scrolling form and the recipe: Run never scrolls away
        editor_layout = QVBoxLayout(editor)
        editor_layout.setContentsMargins(0, 0, 0, 0)
        editor_layout.addWidget(splitter, 1)
        editor_layout.addWidget(self.run_box.action_bar)
        return editor

    # --- methods and capabilities --------------------------------------------------------------------------

    def set_methods(self, methods: dict[str, Any]) -> None:
        self.methods = methods
        self.method_box.set_methods(methods)
        self._refresh_capabilities()
        if not self.output_edit.text():
            self.output_edit.setText(str(default_output_folder() / "merged-model"))
        self.stack.setCurrentIndex(1)
        if not self.document:
            self._restore_form()
        if self.document:
            self.apply_document(self.document)
        else:
            self._method_changed()

    def _engine_failed(self, error: BaseException) -> None:
        from guiapp.system.explain import explain

        explanation = explain(error)
        self.loading.setText(f"The merge engine could not be loaded.\n\n{explanation.what}\n\n{explanation.fix}")
        set_status_style(self.loading, "problem")

    def _refresh_capabilities(self) -> None:
        self.output.refresh_capabilities(self.state.probe, self.document.get("out_dtype"))

    def _device_changed(self) -> None:
        self._refresh_capabilities()
        self._form_changed()

    def _update_dtype_note(self) -> None:
        self.output.show_dtype_note(self.state.probe, self.document.get("out_dtype"))

    # --- form → document --------------------------------------------------------------------------------------

    def _method(self) -> Any:
        return self.method_box.method()

    def _method_changed(self) -> None:
        method = self._method()
        if method is None:
            return
        self.method_box.describe(method)
        self.models_box.set_base_role(method.base_role.value)
        if self._syncing:
            return
        rows = self.table.entries()
        globals_ = self.param_form.values()
        self.table.set_method(method)
        self.param_form.set_specs(method.global_params)
        self.param_form.set_values({k: v for k, v in globals_.items() if method.param(k)})
        for ref, values, extra in rows:
            self.table.add_row(ref, {k: v for k, v in values.items() if v is not None}, extra)
        self._form_changed()

    def add_model(self, ref: str) -> None:
        """Add `ref` to the models table with the method's default per-model values shown and written."""
        if self._method() is None:
            return
        self.table.add_row(ref, {}, explicit_defaults=True)
        self._form_changed()

    def load_sample(self, document: dict[str, Any], output: str) -> bool:
        """Show the sample recipe, writing into `output` (a free folder: Replace stays the user's own choice);
        returns whether it took the place of a recipe naming models, which `undo()` brings back."""
        self.recipe_panel.flush()  # a YAML edit not yet applied is part of the recipe Undo brings back
        replaced = self.recipe.has_inputs() and self.document != document
        self.output_edit.setText(output)
        self.overwrite_check.setChecked(False)
        self.apply_document(document)
        return replaced

    def set_base(self, ref: str) -> None:
        self.base_picker.set_text(ref)

    # --- keeping the work: restarts, New merge, undo --------------------------------------------------------------

    def save_form(self) -> None:
        """Keep the recipe being edited and its output folder for the next start (never the Replace choice)."""
        from guiapp.jobs.form_memory import remember_form

        self.recipe_panel.flush()
        remember_form("merge", {"recipe": self.recipe.copy(), "output": self.output_edit.text().strip()})

    def _restore_form(self) -> None:
        from guiapp.jobs.form_memory import remembered_form

        form = remembered_form("merge")
        if isinstance(form.get("output"), str) and form["output"]:
            self.output_edit.setText(form["output"])
        if isinstance(form.get("recipe"), dict):
            self.recipe.replace(form["recipe"])

    def new_merge(self) -> None:
        """Start an empty recipe with the chosen method; `undo()` brings the previous one back."""
        method = self._method()
        self.recipe_panel.flush()
        self.overwrite_check.setChecked(False)
        self.apply_document({"merge_method": method.name} if method else {})

    def undo(self) -> bool:
        """Take the recipe back one change (the form and the YAML follow); False when there is none."""
        if not self.recipe.undo():
            return False
        self.apply_document(self.recipe.data)
        return True

    def redo(self) -> bool:
        """Make the last undone change again; False when there is none."""
        if not self.recipe.redo():
            return False
        self.apply_document(self.recipe.data)
        return True

    @property
    def document(self) -> dict[str, Any]:
        """The recipe as it stands (read only: edits go through `self.recipe`)."""
        return self.recipe.data

    def form_document(self) -> dict[str, Any]:
        """Make the recipe what the form shows (keys the form does not edit are kept) and return it."""
        method = self._method()
        wanted = self.document.get("out_dtype")
        self.recipe.apply_form(FormValues(
            merge_method=method.name if method else None,
            base_model=self.base_picker.text(),
            models=self.table.rows(),
            parameters={**self._extra_globals, **self.param_form.values()},
            slices=self.advanced.slices(),
            out_dtype=self.dtype_combo.value(),
            keep_out_dtype=bool(wanted) and not self.dtype_combo.is_enabled_choice(wanted),
            tokenizer_source=self.advanced.tokenizer_source(),
            chat_template=self.advanced.chat_template(),
        ))
        return self.document

    def _mark_unused_fields(self) -> None:
        """Disable what the method ignores, saying why: a base listed among the models keeps its own values only
        with a method that merges it as one more input."""
        method = self._method()
        if method is None:
            return
        ignores_base_values = method.base_role.value != "input"
        self.table.mark_unused_base_values(
            self.base_picker.text() if ignores_base_values else None,
            f"Not used: {method.title} measures the other models' changes against the base model, so the base's "
            "own values here are ignored. Set them on the other models.")

    def _slices_edited(self, uses_slices: bool) -> None:
        self.models_box.use_slices(uses_slices)
        self._form_changed()

    def _form_changed(self, *_: Any) -> None:
        if self._syncing or not self.methods:
            return
        self.form_document()
        self._show_yaml()
        self._update_dtype_note()
        self._mark_unused_fields()
        self._schedule_validation()

    def _show_yaml(self) -> None:
        self.recipe_panel.show_text(self.recipe.yaml())

    def _block_on_yaml_problem(self, error: Any) -> None:
        """The YAML view holds a recipe that cannot be read: Run waits for it (it would run the last valid one),
        with "Show me" at the key's line and a fix when there is one."""
        self._validator.cancel()
        can_show, fix = self._offer_fix(getattr(error, "key", None) or (), error.message,
                                        RecipeDocument.written_mapping(self.recipe_panel.text()))
        self.run_box.action_bar.set_blocked(error_text(error), can_show, fix)

    def _offer_fix(self, key: Any, message: str, document: dict[str, Any] | None,
                   error: BaseException | None = None) -> tuple[bool, str | None]:
        """Remember the problem blocking Run and its one-click fix on `document` (None: no fix), or the free folder
        `error` suggests for a taken output; returns whether a control can be shown for it and the fix's label."""
        self._problem = (key, message)
        free = free_output(error, self.output_edit.text().strip())
        self._free_output = free[0] if free else None
        self._fix = fix_for(key, document, self._method()) if document is not None else None
        self._fix_document = document or {}
        label = free[1] if free else self._fix.label if self._fix else None
        return bool(key) and control_for(self, key, message) is not None, label

    # --- document → form -------------------------------------------------------------------------------------

    def _yaml_edited(self) -> None:
        from guiapp.errors import MergesmithError

        try:
            warnings = self.recipe.parse_yaml(self.recipe_panel.text())
        except MergesmithError as error:
            show_message(self.yaml_message, error_text(error), "problem")
            self._block_on_yaml_problem(error)
            return
        show_message(self.yaml_message, "\n".join(warnings) or None, "warning")
        self.apply_document(self.document, from_yaml=True)

    def apply_document(self, document: dict[str, Any], from_yaml: bool = False) -> None:
        """Show `document` in the form (and, unless it came from there, in the YAML view)."""
        self.recipe.replace(document)
        if not self.methods:
            return
        self._syncing = True
        try:
            known = self.method_box.select(document.get("merge_method"))
            method = self._method()
            view = self.recipe.form_view(method)
            show_message(self.method_message, None if known else
                         f'Unknown merge method "{view.method_name}": choose one from the list.', "problem")
            self._method_changed()  # summary, paper and base label for the shown method
            self.base_picker.set_text(view.base_model, notify=False)
            self.table.set_method(method)
            self.param_form.set_specs(method.global_params)
            self.param_form.set_values(view.parameters)
            self._extra_globals = view.other_parameters
            for row in view.rows:
                self.table.add_row(row.reference, row.parameters, row.other)
            self.advanced.show_values(view.slices, view.tokenizer_source, view.chat_template)
            self.table.setEnabled(not view.slices)
            if not self.dtype_combo.select(view.dtype) and view.dtype:
                self.dtype_combo.select(None)
        finally:
            self._syncing = False
        self._update_dtype_note()
        self._mark_unused_fields()
        if not from_yaml:
            self._show_yaml()
        self._schedule_validation()

    # --- validation ------------------------------------------------------------------------------------------

    def recheck(self) -> None:
        """Check the recipe again (what it depends on outside the form changed: a sign-in, offline mode, a job's
        end, the library)."""
        self._schedule_validation()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        """A folder may have appeared or gone while another page (or program) was in front: check again."""
        super().showEvent(event)
        self.recheck()

    def _schedule_validation(self) -> None:
        if not self.methods:
            return
        self._problem, self._fix, self._free_output = None, None, None
        method = self._method()
        self.run_box.describe_job(method.title if method else "", len(self.document.get("models") or []),
                                  self.output_edit.text().strip())
        if not self.recipe.has_inputs():
            self._validator.cancel()
            for label in (self.base_message, self.models_message, self.params_message, self.output_message):
                show_message(label, None)
            self.models_box.show_verdict(None)
            self.run_box.show_waiting("The estimate appears once the models are chosen.")
            return
        self.run_box.show_checking()
        document = self.recipe.copy()
        device = self.device_combo.value() or "cpu"
        output = self.output_edit.text().strip()
        probe, replace = self.state.probe, self.overwrite_check.isChecked()
        self._validator.request(lambda: self._check(document, device, output, probe, replace))

    async def _check(self, document: dict[str, Any], device: str, output: str, probe: Any, replace: bool) -> None:
        self._show_validation(await run_blocking(check_merge, document, device, output, probe, replace))

    def _show_validation(self, result: Any) -> None:
        """Show a `MergeCheck`: each problem next to the field its key names, then the verdict and the estimate."""
        from guiapp.jobs.validation import Severity  # loaded by the check that produced `result`

        self.output.refresh_capabilities(self.state.probe, self.document.get("out_dtype"), result.output_sizes)
        labels = {"method": self.method_message, "base": self.base_message, "models": self.models_message,
                  "params": self.params_message, "slices": self.slices_message, "output": self.output_message}
        shown: dict[QLabel, list[str]] = {label: [] for label in labels.values() if label is not self.method_message}
        worst: dict[QLabel, str] = {}
        for problem in result.problems:
            label = labels[FIELD_OF_KEY.get(str(problem.key[0]) if problem.key else "", "models")]
            shown.setdefault(label, []).append(problem.text)  # in the form's words once joined
            if problem.severity is Severity.ERROR or label not in worst:
                worst[label] = "problem" if problem.severity is Severity.ERROR else "warning"
        for label, texts in shown.items():
            show_message(label, self._words("\n".join(texts)) or None, worst.get(label, "problem"))
        self.models_box.show_verdict(result)
        problem = result.errors[0] if result.errors else None
        can_show, fix = self._offer_fix(problem.key, problem.message, self.recipe.copy(), problem.error) \
            if problem else (False, None)
        self.run_box.show_check(result, can_show, fix, self._words(problem.text) if problem else "")
        if result.compatible:  # the headers were read (a recipe error keeps the layers known so far)
            layer_chart.set_layer_count(result.layers)

    def _words(self, text: str) -> str:
        """A check's `text` as the window says it: the form's labels and the models' short names, no flag."""
        from guiapp.jobs.plain_words import recipe_words

        document = self.document
        references = [document.get("base_model"), document.get("tokenizer_source")]
        references += [entry.get("model") if isinstance(entry, dict) else entry
                       for entry in document.get("models") or []]
        output = self.output_edit.text().strip()  # its whole path is in the field above: the name is enough
        references += [output, str(expanded(output))] if output else []
        return window_text(recipe_words(text, self._method(), [str(r) for r in references if r]))

    def show_problem(self) -> bool:
        """Focus and outline the control that fixes the problem blocking Run; False when there is none."""
        return self._problem is not None and point_at(self, *self._problem)

    def fix_problem(self) -> None:
        """Make the offered one-click fix (one undo step), show the control it changed, and check again."""
        if self._problem is not None and self._free_output:
            key = self._problem[0]
            self.output_edit.setText(self._free_output)  # checks again, which forgets the problem and its fix
            point_at(self, key, "")
            return
        if self._fix is None or self._problem is None:
            return
        key, fixed = self._problem[0], RecipeDocument(self._fix_document)
        self._fix.apply(fixed)
        self.apply_document(fixed.data)  # checks again, which forgets the problem and its fix
        point_at(self, key, "")

    def run(self) -> str | None:
        """Submit the merge the form describes; returns the job's record key (None when it cannot start)."""
        from guiapp.errors import MergesmithError
        from guiapp.jobs.specs import merge_job

        self.recipe_panel.flush()  # a YAML edit not yet applied is part of what the user runs
        output = self.output_edit.text().strip()
        if not output:
            show_message(self.output_message, "Choose an output folder.", "problem")
            return None
        try:
            recipe = self.recipe.to_recipe()
        except MergesmithError as error:
            self.run_message.setText(error.message)
            set_status_style(self.run_message, "problem")
            return None
        job = merge_job(recipe, expanded(output), device=self.device_combo.value() or "cpu",
                        overwrite=self.overwrite_check.isChecked())
        record = self.state.jobs.submit(job)
        self.job_submitted.emit(record.key)
        return record.key

