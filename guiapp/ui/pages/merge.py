"""The Merge page: a form built from the method registry, a live mergekit-compatible YAML view, validation
next to the fields it concerns, the estimate and the compatibility verdict, and Run.

The recipe document (a plain dict, exactly what the YAML shows) is the page's state. The form writes into it
and the YAML view shows it; editing the YAML replaces it and the form follows. Keys the form has no widget for
(dtype, chat_template…) are kept as they are. The check (`guiapp.jobs.validation.check_merge`, headers only)
runs on a worker thread, debounced, and only the newest answer is shown: each problem next to the field its key
names.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.validation import check_merge
from guiapp.system.paths import home_dir
from guiapp.ui.background import LatestCall, call_in_background
from guiapp.ui.text import error_text, sentence
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.model_picker import ModelPicker, library_entries
from guiapp.ui.widgets.options import OptionCombo, device_choices, dtype_choices
from guiapp.ui.widgets.param_form import ParamEditor, ParamForm

RECIPE_DTYPES = ("bfloat16", "float16", "float32", "float64")  # what a recipe's out_dtype accepts
FORM_KEYS = ("merge_method", "base_model", "models", "slices", "parameters", "out_dtype", "tokenizer_source")
VALIDATION_DELAY_MS = 500
YAML_DELAY_MS = 400


# Which message label shows a problem, by the first part of its key (anything else goes next to the models).
FIELD_OF_KEY = {"merge_method": "method", "base_model": "base", "models": "models", "parameters": "params",
                "slices": "slices", "modules": "slices", "output": "output", "out_dtype": "output", "dtype": "output"}


class MergePage(QWidget):
    job_submitted = Signal(str)

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.methods: dict[str, Any] = {}
        self.document: dict[str, Any] = {}
        self._rows: list[dict[str, Any]] = []  # {"picker": QLineEdit, "editors": {name: ParamEditor}, "extra": {}}
        self._extra_globals: dict[str, Any] = {}  # method-wide values the schema does not declare, kept as given
        self._syncing = False
        self._validator = LatestCall(VALIDATION_DELAY_MS, self)
        self._yaml_timer = QTimer(self, singleShot=True, interval=YAML_DELAY_MS)
        self._yaml_timer.timeout.connect(self._yaml_edited)
        self.last_validation: Any = None  # the newest guiapp.jobs.validation.MergeCheck

        self.stack = QStackedWidget()
        self.loading = QLabel("Loading the merge methods…", alignment=Qt.AlignmentFlag.AlignCenter)
        self.stack.addWidget(self.loading)
        self.stack.addWidget(self._build_editor())
        layout = QVBoxLayout(self)
        layout.addWidget(self.stack)
        state.methods_ready.connect(self.set_methods)
        state.methods_failed.connect(self._engine_failed)
        state.probe_ready.connect(lambda _: self._refresh_capabilities())
        if state.methods is not None:
            self.set_methods(state.methods)

    # --- building --------------------------------------------------------------------------------------------

    def _build_editor(self) -> QWidget:
        form = QWidget()
        column = QVBoxLayout(form)

        method_box = QGroupBox("Method")
        method_layout = QVBoxLayout(method_box)
        self.method_combo = QComboBox(accessibleName="Merge method")
        self.method_combo.currentIndexChanged.connect(self._method_changed)
        self.method_summary = QLabel(wordWrap=True)
        self.method_paper = QLabel(openExternalLinks=True)
        self.method_message = QLabel(wordWrap=True, visible=False)
        for widget in (self.method_combo, self.method_summary, self.method_paper, self.method_message):
            method_layout.addWidget(widget)
        column.addWidget(method_box)

        models_box = QGroupBox("Models")
        models_layout = QVBoxLayout(models_box)
        base_row = QFormLayout()
        self.base_picker = ModelPicker("The base model: org/name or a folder")
        self.base_picker.changed.connect(self._form_changed)
        self.base_label = QLabel("Base model")
        self.base_label.setBuddy(self.base_picker.combo)
        base_row.addRow(self.base_label, self.base_picker)
        self.base_message = QLabel(wordWrap=True, visible=False)
        base_row.addRow("", self.base_message)
        models_layout.addLayout(base_row)
        self.table = QTableWidget(0, 1)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.setMinimumHeight(150)
        models_layout.addWidget(self.table)
        buttons = QHBoxLayout()
        self.add_model_picker = ModelPicker("Add a model: org/name or a folder")
        self.add_model_button = QPushButton("Add model")
        self.add_model_button.clicked.connect(self._add_model_clicked)
        self.add_model_picker.combo.lineEdit().returnPressed.connect(self._add_model_clicked)
        buttons.addWidget(self.add_model_picker, 1)
        buttons.addWidget(self.add_model_button)
        models_layout.addLayout(buttons)
        self.models_message = QLabel(wordWrap=True, visible=False)
        self.compatibility = QLabel(wordWrap=True)
        models_layout.addWidget(self.models_message)
        models_layout.addWidget(self.compatibility)
        column.addWidget(models_box)

        params_box = QGroupBox("Method parameters")
        params_layout = QVBoxLayout(params_box)
        self.param_form = ParamForm()
        self.param_form.changed.connect(self._form_changed)
        self.params_message = QLabel(wordWrap=True, visible=False)
        params_layout.addWidget(self.param_form)
        params_layout.addWidget(self.params_message)
        column.addWidget(params_box)

        self.advanced_button = QToolButton(text="Advanced: tokenizer, slices, gradients", checkable=True)
        self.advanced_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.advanced_button.setArrowType(Qt.ArrowType.RightArrow)
        self.advanced_button.toggled.connect(self._toggle_advanced)
        column.addWidget(self.advanced_button)
        self.advanced = QGroupBox()
        advanced_layout = QFormLayout(self.advanced)
        self.tokenizer_combo = QComboBox(editable=True, accessibleName="Tokenizer source")
        self.tokenizer_combo.addItems(["", "base"])
        self.tokenizer_combo.lineEdit().setPlaceholderText("the base model's (default)")
        self.tokenizer_combo.editTextChanged.connect(self._form_changed)
        advanced_layout.addRow("Tokenizer source", self.tokenizer_combo)
        self.slices_edit = QPlainTextEdit(placeholderText="- sources:\n  - model: org/a\n    layer_range: [0, 16]\n"
                                          "  - model: org/b\n    layer_range: [0, 16]")
        self.slices_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.slices_edit.setMaximumHeight(140)
        self.slices_edit.setTabChangesFocus(True)
        self.slices_edit.textChanged.connect(self._slices_edited)
        advanced_layout.addRow("Slices (YAML)", self.slices_edit)
        self.slices_message = QLabel(wordWrap=True, visible=False)
        advanced_layout.addRow("", self.slices_message)
        advanced_layout.addRow(QLabel("Gradients and filters: press “list” next to any number to give a list "
                                      "across layers or {filter, value} entries.", wordWrap=True))
        self.advanced.setVisible(False)
        column.addWidget(self.advanced)

        output_box = QGroupBox("Output")
        output_layout = QFormLayout(output_box)
        self.device_combo = OptionCombo()
        self.device_combo.setAccessibleName("Device")
        self.device_combo.choice_changed.connect(lambda _: self._device_changed())
        output_layout.addRow("Device", self.device_combo)
        self.dtype_combo = OptionCombo()
        self.dtype_combo.setAccessibleName("Output dtype")
        self.dtype_combo.choice_changed.connect(lambda _: self._form_changed())
        output_layout.addRow("Output dtype", self.dtype_combo)
        self.dtype_note = QLabel(wordWrap=True)
        output_layout.addRow("", self.dtype_note)
        folder_row = QHBoxLayout()
        self.output_edit = QLineEdit(accessibleName="Output folder")
        self.output_edit.textChanged.connect(lambda _: self._schedule_validation())
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_output)
        folder_row.addWidget(self.output_edit, 1)
        folder_row.addWidget(browse)
        output_layout.addRow("Output folder", folder_row)
        self.overwrite_check = QCheckBox("Replace the folder if it already exists (only once the merge is done)")
        self.overwrite_check.toggled.connect(lambda _: self._schedule_validation())
        output_layout.addRow("", self.overwrite_check)
        self.output_message = QLabel(wordWrap=True, visible=False)
        output_layout.addRow("", self.output_message)
        column.addWidget(output_box)

        estimate_box = QGroupBox("Before you run")
        estimate_layout = QVBoxLayout(estimate_box)
        self.estimate = QLabel("Fill in the models to see the estimate.", wordWrap=True)
        self.fit_label = QLabel(wordWrap=True)
        estimate_layout.addWidget(self.estimate)
        estimate_layout.addWidget(self.fit_label)
        run_row = QHBoxLayout()
        self.run_button = QPushButton("Run merge")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(self.run)
        self.run_message = QLabel(wordWrap=True)
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.run_message, 1)
        estimate_layout.addLayout(run_row)
        column.addWidget(estimate_box)
        column.addStretch()

        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(form)

        yaml_panel = QWidget()
        yaml_layout = QVBoxLayout(yaml_panel)
        yaml_layout.addWidget(QLabel("<b>Recipe (mergekit YAML)</b> — edit it and the form follows"))
        self.yaml_edit = QPlainTextEdit(accessibleName="Recipe YAML")
        self.yaml_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.yaml_edit.setTabChangesFocus(True)
        self.yaml_edit.textChanged.connect(self._yaml_typed)
        yaml_layout.addWidget(self.yaml_edit, 1)
        self.yaml_message = QLabel(wordWrap=True, visible=False)
        yaml_layout.addWidget(self.yaml_message)
        file_row = QHBoxLayout()
        self.import_button = QPushButton("Import .yml…")
        self.import_button.clicked.connect(self.import_recipe)
        self.export_button = QPushButton("Export .yml…")
        self.export_button.clicked.connect(self.export_recipe)
        file_row.addWidget(self.import_button)
        file_row.addWidget(self.export_button)
        file_row.addStretch()
        yaml_layout.addLayout(file_row)

        splitter = QSplitter()
        splitter.addWidget(scroll)
        splitter.addWidget(yaml_panel)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setSizes([700, 420])
        self.splitter = splitter
        return splitter

    # --- methods and capabilities --------------------------------------------------------------------------

    def set_methods(self, methods: dict[str, Any]) -> None:
        self.methods = methods
        self._syncing = True
        self.method_combo.clear()
        for name, method in methods.items():
            self.method_combo.addItem(f"{method.title} ({name})", name)
        self._syncing = False
        self._refresh_capabilities()
        if not self.output_edit.text():
            self.output_edit.setText(str(default_output_folder() / "merged-model"))
        self.stack.setCurrentIndex(1)
        self._load_library()
        if self.document:
            self.apply_document(self.document)
        else:
            self._method_changed()

    def _engine_failed(self, error: BaseException) -> None:
        from guiapp.system.explain import explain  # noqa: PLC0415

        explanation = explain(error)
        self.loading.setWordWrap(True)
        self.loading.setText(f"The merge engine could not be loaded.\n\n{explanation.what}\n\n{explanation.fix}")
        set_status_style(self.loading, "problem")

    def _load_library(self) -> None:
        def show(entries: list[str]) -> None:
            for picker in (self.base_picker, self.add_model_picker):
                picker.set_library(entries)

        call_in_background(library_entries, show)

    def _refresh_capabilities(self) -> None:
        probe = self.state.probe
        self.device_combo.set_choices(device_choices(probe, "merge"))
        self.dtype_combo.set_choices(dtype_choices(probe, "merge", self.device_combo.value() or "cpu", RECIPE_DTYPES,
                                                   "Same as the models"), keep=self.document.get("out_dtype"))
        self._update_dtype_note()

    def _device_changed(self) -> None:
        self._refresh_capabilities()
        self._form_changed()

    def _update_dtype_note(self) -> None:
        wanted = self.document.get("out_dtype")
        if self.state.probe is None:
            self.dtype_note.setText("Checking what this machine supports…")
            set_status_style(self.dtype_note, "muted")
        elif wanted and not self.dtype_combo.is_enabled_choice(wanted):
            from guiapp.system.capabilities import option  # noqa: PLC0415

            device = self.device_combo.value() or "cpu"
            reason = option(self.state.probe, "merge", device, wanted).reason if wanted in RECIPE_DTYPES else \
                "it is not a dtype a recipe can store"
            self.dtype_note.setText(f"The recipe asks for {wanted}, which cannot be used on {device}: {reason}. "
                                    "Pick another output dtype or device.")
            set_status_style(self.dtype_note, "problem")
        else:
            self.dtype_note.setText("Every merge is computed in float32, then stored in the output dtype.")
            set_status_style(self.dtype_note, "muted")

    # --- form → document --------------------------------------------------------------------------------------

    def _method(self) -> Any:
        return self.methods.get(self.method_combo.currentData())

    def _show_paper(self, method: Any) -> None:
        # Rich text takes the link colour when set, so it is set again when the palette changes.
        link = self.palette().color(QPalette.ColorRole.Link).name()
        self.method_paper.setText(f'<a href="{method.paper}" style="color: {link}">Paper: {method.paper}</a>'
                                  if method.paper else "No paper: a standard technique.")
        self.method_paper.setToolTip(method.paper or "")

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._method() is not None:
            self._show_paper(self._method())

    def _method_changed(self) -> None:
        method = self._method()
        if method is None:
            return
        self.method_summary.setText(method.summary)
        self._show_paper(method)
        role = method.base_role.value
        self.base_label.setText({"required": "Base model *", "optional": "Base model (optional)"}.get(role, "Base model"))
        self.base_picker.setToolTip({"required": "This method measures each model's changes against the base.",
                                     "optional": "Used as the reference when given.",
                                     "input": "For this method the base is just one more input."}[role])
        if self._syncing:
            return
        rows = [(row["picker"].text(), {n: e.value() for n, e in row["editors"].items()}, row["extra"])
                for row in self._rows]
        globals_ = self.param_form.values()
        self._build_table(method)
        self.param_form.set_specs(method.global_params)
        self.param_form.set_values({k: v for k, v in globals_.items() if method.param(k)})
        for ref, values, extra in rows:
            self._add_row(ref, {k: v for k, v in values.items() if v is not None}, extra)
        self._form_changed()

    def _build_table(self, method: Any) -> None:
        self._rows = []
        specs = method.per_model_params
        self.table.clear()
        self.table.setRowCount(0)
        self.table.setColumnCount(len(specs) + 2)
        self.table.setHorizontalHeaderLabels(["Model", *[s.name for s in specs], ""])
        for column, spec in enumerate(specs, start=1):
            self.table.horizontalHeaderItem(column).setToolTip(spec.help)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(60)
        for column in range(1, len(specs) + 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            self.table.setColumnWidth(column, 190)
        header.setSectionResizeMode(len(specs) + 1, QHeaderView.ResizeMode.ResizeToContents)

    def _add_row(self, ref: str, values: dict[str, Any], extra: dict[str, Any] | None = None,
                 explicit_defaults: bool = False) -> None:
        method = self._method()
        row = self.table.rowCount()
        self.table.insertRow(row)
        picker = QLineEdit(ref, accessibleName=f"Model {row + 1}")
        picker.setToolTip(ref)
        picker.textChanged.connect(self._form_changed)
        picker.textChanged.connect(picker.setToolTip)
        self.table.setCellWidget(row, 0, picker)
        editors: dict[str, ParamEditor] = {}
        for column, spec in enumerate(method.per_model_params, start=1):
            editor = ParamEditor(spec)
            editor.set_value(values.get(spec.name))
            if explicit_defaults and spec.name not in values and (spec.required or spec.default is not None):
                if spec.default is None:
                    editor.set_value(spec.maximum if spec.maximum is not None and spec.maximum <= 1 else 1.0)
                editor.set_explicit_default()
            editor.changed.connect(self._form_changed)
            self.table.setCellWidget(row, column, editor)
            editors[spec.name] = editor
        remove = QToolButton(text="Remove")
        remove.setToolTip("Remove this model from the merge")
        entry = {"picker": picker, "editors": editors, "extra": dict(extra or {})}
        remove.clicked.connect(lambda: self._remove_row(entry))
        self.table.setCellWidget(row, len(method.per_model_params) + 1, remove)
        self.table.setRowHeight(row, max(34, picker.sizeHint().height() + 6))
        self._rows.append(entry)

    def _remove_row(self, entry: dict[str, Any]) -> None:
        index = self._rows.index(entry)
        self._rows.pop(index)
        self.table.removeRow(index)
        self._form_changed()

    def _add_model_clicked(self) -> None:
        ref = self.add_model_picker.text()
        if ref:
            self.add_model(ref)
            self.add_model_picker.set_text("", notify=False)

    def add_model(self, ref: str) -> None:
        """Add `ref` to the models table with the method's default per-model values shown and written."""
        if self._method() is None:
            return
        self._add_row(ref, {}, explicit_defaults=True)
        self._form_changed()

    def load_sample(self, document: dict[str, Any], output: str) -> None:
        """Show the sample recipe, writing into `output` (replaced on each try, so the sample can be rerun)."""
        self.output_edit.setText(output)
        self.overwrite_check.setChecked(True)
        self.apply_document(document)

    def set_base(self, ref: str) -> None:
        self.base_picker.set_text(ref)

    def form_document(self) -> dict[str, Any]:
        """The recipe as the form shows it, with the keys the form does not edit kept from the last document."""
        method = self._method()
        document: dict[str, Any] = {"merge_method": method.name if method else self.document.get("merge_method")}
        if self.base_picker.text():
            document["base_model"] = self.base_picker.text()
        slices = self._slices_value()
        # A recipe listing its models under `modules:` keeps them there (the form has no widgets for modules).
        listed_in_modules = bool(self.document.get("modules")) and slices is None and not self._rows
        if slices is not None:
            document["slices"] = slices
        elif not listed_in_modules:
            models = []
            for row in self._rows:
                parameters = {**row["extra"], **{n: e.value() for n, e in row["editors"].items() if e.value() is not None}}
                entry: dict[str, Any] = {"model": row["picker"].text()}
                if parameters:
                    entry["parameters"] = parameters
                models.append(entry)
            document["models"] = models
        parameters = {**self._extra_globals, **self.param_form.values()}
        if parameters:
            document["parameters"] = parameters
        if self.dtype_combo.value():
            document["out_dtype"] = self.dtype_combo.value()
        elif self.document.get("out_dtype") and not self.dtype_combo.is_enabled_choice(self.document["out_dtype"]):
            document["out_dtype"] = self.document["out_dtype"]  # kept so the problem stays visible, not hidden
        if self.tokenizer_combo.currentText().strip():
            document["tokenizer_source"] = self.tokenizer_combo.currentText().strip()
        document.update({k: v for k, v in self.document.items() if k not in FORM_KEYS})
        return document

    def _slices_value(self) -> Any:
        from guiapp.errors import MergesmithError, RecipeError  # noqa: PLC0415
        from guiapp.system.bounded import parse_yaml_bounded  # noqa: PLC0415 - not needed before the first recipe

        text = self.slices_edit.toPlainText().strip()
        if not text:
            return None
        try:
            return parse_yaml_bounded(text, "The slices", RecipeError)
        except MergesmithError:
            return text  # reported by the validator next to the slices

    def _slices_edited(self) -> None:
        uses_slices = bool(self.slices_edit.toPlainText().strip())
        self.table.setEnabled(not uses_slices)
        self.add_model_button.setEnabled(not uses_slices)
        self.table.setToolTip("This recipe uses slices (Advanced): the models come from there." if uses_slices else "")
        self._form_changed()

    def _toggle_advanced(self, shown: bool) -> None:
        self.advanced.setVisible(shown)
        self.advanced_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)

    def _form_changed(self, *_: Any) -> None:
        if self._syncing or not self.methods:
            return
        self.document = self.form_document()
        self._show_yaml()
        self._update_dtype_note()
        self._schedule_validation()

    def _show_yaml(self) -> None:
        from guiapp.engine.model_card import recipe_yaml  # noqa: PLC0415 - loaded with the methods

        self._syncing = True
        scroll = self.yaml_edit.verticalScrollBar().value()
        self.yaml_edit.setPlainText(recipe_yaml(self.document))
        self.yaml_edit.verticalScrollBar().setValue(scroll)
        self._syncing = False
        self._show_message(self.yaml_message, None)

    # --- document → form -------------------------------------------------------------------------------------

    def _yaml_typed(self) -> None:
        if not self._syncing:
            self._yaml_timer.start()

    def _yaml_edited(self) -> None:
        from guiapp.engine.recipe import parse_recipe  # noqa: PLC0415
        from guiapp.errors import MergesmithError  # noqa: PLC0415

        try:
            recipe = parse_recipe(self.yaml_edit.toPlainText(), label="The recipe")
        except MergesmithError as error:
            self._show_message(self.yaml_message, error_text(error), "problem")
            return
        self._show_message(self.yaml_message, "\n".join(recipe.warnings) or None, "warning")
        self.apply_document(recipe.document, from_yaml=True)

    def apply_document(self, document: dict[str, Any], from_yaml: bool = False) -> None:
        """Show `document` in the form (and, unless it came from there, in the YAML view)."""
        self.document = copy.deepcopy(document)
        if not self.methods:
            return
        self._syncing = True
        try:
            name = document.get("merge_method")
            index = self.method_combo.findData(name)
            known = index >= 0
            if known:
                self.method_combo.setCurrentIndex(index)
            self._show_message(self.method_message, None if known else
                               f'Unknown merge method "{name}": choose one from the list.', "problem")
            method = self._method()
            self._method_changed()  # summary, paper and base label for the shown method
            self.base_picker.set_text(str(document.get("base_model") or ""), notify=False)
            self._build_table(method)
            self.param_form.set_specs(method.global_params)
            globals_ = dict(document.get("parameters") or {})
            self.param_form.set_values({k: v for k, v in globals_.items() if method.param(k) and not method.param(k).per_model})
            self._extra_globals = {k: v for k, v in globals_.items() if k not in self.param_form.editors}
            for entry in document.get("models") or []:
                values = dict(entry.get("parameters") or {}) if isinstance(entry, dict) else {}
                per_model = {s.name for s in method.per_model_params}
                self._add_row(str(entry.get("model", "")) if isinstance(entry, dict) else str(entry),
                              {k: v for k, v in values.items() if k in per_model},
                              {k: v for k, v in values.items() if k not in per_model})
            import yaml  # noqa: PLC0415

            slices = document.get("slices")
            self.slices_edit.setPlainText(yaml.safe_dump(slices, sort_keys=False).strip() if slices else "")
            self.table.setEnabled(not slices)
            if slices:
                self.advanced_button.setChecked(True)
            self.tokenizer_combo.setEditText(str(document.get("tokenizer_source") or ""))
            wanted = document.get("out_dtype") or document.get("dtype")
            if not self.dtype_combo.select(wanted) and wanted:
                self.dtype_combo.select(None)
        finally:
            self._syncing = False
        self._update_dtype_note()
        if not from_yaml:
            self._show_yaml()
        self._schedule_validation()

    # --- validation ------------------------------------------------------------------------------------------

    def _schedule_validation(self) -> None:
        if not self.methods:
            return
        if not any(self.document.get(key) for key in ("models", "slices", "modules")):
            self._validator.cancel()
            for label in (self.base_message, self.models_message, self.params_message, self.output_message):
                self._show_message(label, None)
            self.compatibility.setText("Add the models to merge: type a Hub id or a folder below the table, "
                                       "or use “Add to merge” on the Models page.")
            set_status_style(self.compatibility, "muted")
            self.estimate.setText("The estimate appears once the models are chosen.")
            self.fit_label.clear()
            self.run_message.clear()
            return
        self.run_message.setText("Checking…")
        set_status_style(self.run_message, "muted")
        document = copy.deepcopy(self.document)
        device = self.device_combo.value() or "cpu"
        output = self.output_edit.text().strip()
        probe, replace = self.state.probe, self.overwrite_check.isChecked()
        self._validator.request(lambda: check_merge(document, device, output, probe, replace), self._show_validation)

    def _show_validation(self, result: Any) -> None:
        """Show a `MergeCheck`: each problem next to the field its key names, then the verdict and the estimate."""
        from guiapp.jobs.validation import Severity  # noqa: PLC0415 - loaded by the check that produced `result`
        from guiapp.system.units import format_bytes, format_seconds  # noqa: PLC0415

        self.last_validation = result
        labels = {"method": self.method_message, "base": self.base_message, "models": self.models_message,
                  "params": self.params_message, "slices": self.slices_message, "output": self.output_message}
        shown: dict[QLabel, list[str]] = {label: [] for label in labels.values() if label is not self.method_message}
        worst: dict[QLabel, str] = {}
        for problem in result.problems:
            label = labels[FIELD_OF_KEY.get(str(problem.key[0]) if problem.key else "", "models")]
            shown.setdefault(label, []).append(problem.text)
            if problem.severity is Severity.ERROR or label not in worst:
                worst[label] = "problem" if problem.severity is Severity.ERROR else "warning"
        for label, texts in shown.items():
            self._show_message(label, "\n".join(texts) or None, worst.get(label, "problem"))
        if result.compatible is False:
            self.compatibility.setText("✗ Not compatible as written: see above.")
            set_status_style(self.compatibility, "problem")
        elif result.compatible:
            self.compatibility.setText(f"✓ Compatible: {result.models} models, {result.tensors} output tensors, "
                                       "checked from the files' headers.")
            set_status_style(self.compatibility, "good")
        else:
            self.compatibility.clear()
        if result.errors:
            self.estimate.setText("The estimate appears once the recipe is valid." if not result.compatible else
                                  f"Reads {format_bytes(result.input_bytes)}; writes {format_bytes(result.output_bytes)}.")
            self.fit_label.clear()
            self.run_message.setText("Fix the problem shown above, then run.")
            set_status_style(self.run_message, "problem")
            return
        lines = [f"Reads {format_bytes(result.input_bytes)}; writes {format_bytes(result.output_bytes)}."]
        if result.fit is not None:
            lines.append(f"Working memory about {format_bytes(result.fit.peak_ram)} of RAM"
                         + (f" and {format_bytes(result.fit.peak_vram)} of VRAM" if result.fit.peak_vram else "")
                         + f"; {format_bytes(result.fit.disk_free)} free on the output drive.")
        lines.append(f"Time: about {format_seconds(result.time.seconds)}." if result.time else
                     "Time: known once this machine's speed has been measured (Hardware page).")
        self.estimate.setText("\n".join(lines))
        if result.fit is not None:
            level = result.fit.level.name
            self.fit_label.setText(f"{sentence(result.fit.level.value)}: {result.fit.reason}.")
            self.fit_label.setToolTip(result.fit.summary())
            set_status_style(self.fit_label, {"WILL_NOT_FIT": "problem", "TIGHT": "warning"}.get(level, "good"))
        self.run_message.setText("Ready.")
        set_status_style(self.run_message, "good")

    def _show_message(self, label: QLabel, text: str | None, kind: str = "problem") -> None:
        label.setText(text or "")
        label.setVisible(bool(text))
        set_status_style(label, kind if text else None)

    # --- files and running -------------------------------------------------------------------------------------

    def _browse_output(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Where to create the merged model", str(default_output_folder()))
        if folder:
            self.output_edit.setText(str(Path(folder) / "merged-model"))

    def import_recipe(self, path: str | None = None) -> None:
        path = path or QFileDialog.getOpenFileName(self, "Import a recipe", "", "Recipes (*.yml *.yaml)")[0]
        if path:
            try:
                self.yaml_edit.setPlainText(Path(path).read_text(encoding="utf-8"))
            except OSError as error:
                self._show_message(self.yaml_message, f"Cannot read {path}: {error.strerror}.", "problem")
                return
            self._yaml_timer.stop()
            self._yaml_edited()

    def export_recipe(self, path: str | None = None) -> None:
        path = path or QFileDialog.getSaveFileName(self, "Export the recipe", "recipe.yml", "Recipes (*.yml *.yaml)")[0]
        if path:
            try:
                Path(path).write_text(self.yaml_edit.toPlainText(), encoding="utf-8")
            except OSError as error:
                self._show_message(self.yaml_message, f"Cannot write {path}: {error.strerror}.", "problem")
                return
            self._show_message(self.yaml_message, f"Saved {path}.", "good")

    def run(self) -> str | None:
        """Submit the merge the form describes; returns the job's record key (None when it cannot start)."""
        from guiapp.engine.recipe import recipe_from_dict  # noqa: PLC0415
        from guiapp.errors import MergesmithError  # noqa: PLC0415
        from guiapp.jobs.specs import merge_job  # noqa: PLC0415

        if self._yaml_timer.isActive():  # a YAML edit not yet applied is part of what the user runs
            self._yaml_timer.stop()
            self._yaml_edited()
        output = self.output_edit.text().strip()
        if not output:
            self._show_message(self.output_message, "Choose an output folder.", "problem")
            return None
        try:
            recipe = recipe_from_dict(copy.deepcopy(self.document))
        except MergesmithError as error:
            self.run_message.setText(error.message)
            set_status_style(self.run_message, "problem")
            return None
        job = merge_job(recipe, Path(output).expanduser(), device=self.device_combo.value() or "cpu",
                        overwrite=self.overwrite_check.isChecked())
        record = self.state.jobs.submit(job)
        self.job_submitted.emit(record.key)
        return record.key


def default_output_folder() -> Path:
    return Path(QSettings().value("paths/output", str(home_dir() / "Mergesmith")))
