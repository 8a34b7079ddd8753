"""The Merge page: a form built from the merge methods' declarations (at once, before torch has loaded), a live
mergekit-compatible YAML view, validation next to the fields it concerns (once the engine has loaded), the
estimate and the compatibility verdict, and Run.

The recipe document (`guiapp.jobs.recipe_document.RecipeDocument`: a plain mapping, exactly what the YAML shows,
with undo; no Qt) is the page's state. The form writes into it and the YAML view shows it; editing the YAML
replaces it and the form follows (`guiapp.ui.merge.form_sync.FormSync` keeps them in step). Keys the form has no
widget for (dtype, chat_template…) are kept as they are. The check (`guiapp.jobs.validation.check_merge`, headers
only) runs on a worker thread, debounced, and only the newest answer is shown: each problem next to the field its
key names.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.recipe_document import RecipeDocument
from guiapp.system.paths import expanded
from guiapp.ui.merge.advanced_box import AdvancedBox
from guiapp.ui.merge.form_sync import FormSync
from guiapp.ui.merge.messages import show_message
from guiapp.ui.merge.method_box import MethodBox
from guiapp.ui.merge.models_box import ModelsBox
from guiapp.ui.merge.output_box import OutputBox, default_output_folder
from guiapp.ui.merge.params_box import ParamsBox
from guiapp.ui.merge.recipe_check import RecipeCheck
from guiapp.ui.merge.recipe_panel import RecipePanel
from guiapp.ui.merge.run_box import RunBox
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets import layer_chart
from guiapp.ui.widgets.wrapping_label import WrappingLabel


class MergePage(QWidget):
    job_submitted = Signal(str)

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.methods: dict[str, Any] = {}
        self.recipe = RecipeDocument()  # the page's state: what the YAML view shows and the form edits
        self.sync = FormSync(self)  # the form and the recipe kept showing one recipe
        self.checker = RecipeCheck(self)  # the check of the recipe, each problem shown next to its field
        self._validator = self.checker.validator
        layer_chart.install()  # a list across the layers is drawn under its editor, its points draggable

        self.stack = QStackedWidget()
        self.loading = WrappingLabel("", alignment=Qt.AlignmentFlag.AlignCenter)  # why the engine failed to load
        self.stack.addWidget(self.loading)
        self.stack.addWidget(self._build_editor())
        layout = QVBoxLayout(self)
        layout.addWidget(self.stack)
        for picker in (self.base_picker, self.add_model_picker):
            picker.use_library(state.library)
        state.methods_ready.connect(lambda _: self.recheck())  # the check waits for the engine
        state.methods_failed.connect(self._engine_failed)
        state.probe_ready.connect(lambda _: self._refresh_capabilities())
        state.checks_outdated.connect(self.recheck)
        self.set_methods(state.declarations)

    # --- building --------------------------------------------------------------------------------------------

    def _build_editor(self) -> QWidget:
        form = QWidget()
        column = QVBoxLayout(form)

        self.method_box = MethodBox()
        self.method_box.method_combo.currentIndexChanged.connect(self.sync.method_changed)
        self.method_combo, self.method_message = self.method_box.method_combo, self.method_box.method_message
        column.addWidget(self.method_box)

        self.models_box = ModelsBox()
        self.models_box.changed.connect(self.sync.form_changed)
        self.models_box.add_requested.connect(self.add_model)
        box = self.models_box
        self.base_picker, self.base_message, self.table = box.base_picker, box.base_message, box.table
        self.add_model_picker, self.add_model_button = box.add_model_picker, box.add_model_button
        self.models_message, self.compatibility = box.models_message, box.compatibility
        column.addWidget(box)

        self.params_box = ParamsBox()
        self.param_form, self.params_message = self.params_box.param_form, self.params_box.params_message
        self.param_form.changed.connect(self.sync.form_changed)
        column.addWidget(self.params_box)

        self.advanced = AdvancedBox()
        self.advanced.changed.connect(self.sync.form_changed)
        self.advanced.slices_changed.connect(self.sync.slices_edited)
        self.slices_edit, self.slices_message = self.advanced.slices_edit, self.advanced.slices_message
        column.addWidget(self.advanced)

        self.output = OutputBox()
        self.output.device_changed.connect(self._device_changed)
        self.output.dtype_changed.connect(self.sync.form_changed)
        self.output.folder_changed.connect(self.checker.schedule)
        self.device_combo, self.dtype_combo = self.output.device_combo, self.output.dtype_combo
        self.output_edit, self.overwrite_check = self.output.output_edit, self.output.overwrite_check
        self.output_message, self.dtype_note = self.output.output_message, self.output.dtype_note
        column.addWidget(self.output)

        self.run_box = RunBox()
        self.run_box.run_button.clicked.connect(self.run)
        self.run_box.action_bar.show_button.clicked.connect(self.checker.show_problem)
        self.run_box.action_bar.fix_button.clicked.connect(self.checker.fix_problem)
        self.estimate, self.fit_label = self.run_box.estimate, self.run_box.fit_label
        self.run_button, self.run_message = self.run_box.run_button, self.run_box.run_message
        column.addWidget(self.run_box)
        column.addStretch()

        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(form)

        self.recipe_panel = RecipePanel()
        self.recipe_panel.edited.connect(self.sync.yaml_edited)
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
        """Offer `methods` (name → MethodDeclaration) and show the form, with the recipe of the last session."""
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
            self.sync.method_changed()

    def _engine_failed(self, error: BaseException) -> None:
        """The engine could not be loaded: nothing can be checked or merged, so the reason takes the form's place."""
        from guiapp.system.explain import explain

        explanation = explain(error)
        self.loading.setText(f"The merge engine could not be loaded.\n\n{explanation.what}\n\n{explanation.fix}")
        set_status_style(self.loading, "problem")
        self.stack.setCurrentWidget(self.loading)

    def _refresh_capabilities(self) -> None:
        self.output.refresh_capabilities(self.state.probe, self.document.get("out_dtype"))

    def _device_changed(self) -> None:
        self._refresh_capabilities()
        self.sync.form_changed()

    # --- the recipe -------------------------------------------------------------------------------------------

    def add_model(self, ref: str) -> None:
        """Add `ref` to the models table with the method's default per-model values shown and written."""
        if self.method_box.method() is None:
            return
        self.table.add_row(ref, {}, explicit_defaults=True)
        self.sync.form_changed()

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
        method = self.method_box.method()
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
        return self.sync.form_document()

    def apply_document(self, document: dict[str, Any]) -> None:
        """Show `document` in the form and in the YAML view."""
        self.sync.apply_document(document)

    # --- validation ------------------------------------------------------------------------------------------

    def recheck(self) -> None:
        """Check the recipe again (what it depends on outside the form changed: a sign-in, offline mode, a job's
        end, the library)."""
        self.checker.schedule()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        """A folder may have appeared or gone while another page (or program) was in front: check again."""
        super().showEvent(event)
        self.recheck()

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

