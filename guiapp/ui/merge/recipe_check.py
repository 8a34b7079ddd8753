"""The Merge page's check of its recipe: `guiapp.jobs.validation.check_merge` (headers only) on a worker thread,
debounced, only the newest answer shown; each problem next to the field its key names, the verdict and the
estimate, and the problem blocking Run with its "Show me" and one-click fix."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel

from guiapp.facts.wording import for_window
from guiapp.jobs.recipe_document import RecipeDocument
from guiapp.jobs.recipe_fixes import fix_for
from guiapp.jobs.validation import check_merge, free_output
from guiapp.system.paths import expanded
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.merge.messages import show_message
from guiapp.ui.merge.problem_control import control_for, point_at
from guiapp.ui.text import error_text
from guiapp.ui.widgets import layer_chart

VALIDATION_DELAY_MS = 500

# Which message label shows a problem, by the first part of its key (anything else goes next to the models).
FIELD_OF_KEY = {"merge_method": "method", "base_model": "base", "models": "models", "parameters": "params",
                "slices": "slices", "modules": "slices", "output": "output", "out_dtype": "output", "dtype": "output"}


class RecipeCheck(QObject):
    """Checks the page's recipe and shows the answer on the page (a MergePage: its labels, boxes and recipe)."""

    def __init__(self, page: Any) -> None:
        super().__init__(page)
        self.page = page
        self.validator = LatestTask(VALIDATION_DELAY_MS, page)  # deleting the page cancels a check under way
        # The problem blocking Run (its key and text: the check's first error, or the YAML view's own) and its
        # one-click fix: a guiapp.jobs.recipe_fixes.RecipeFix with the document that fix applies to, or a free
        # output folder when the chosen one is taken.
        self._problem: tuple[Any, str] | None = None
        self._fix: Any = None
        self._fix_document: dict[str, Any] = {}
        self._free_output: str | None = None

    def schedule(self) -> None:
        """Check the recipe as it stands once the form has been still for a moment (a newer change restarts it)."""
        page = self.page
        if not page.methods:
            return
        self._problem, self._fix, self._free_output = None, None, None
        method = page.method_box.method()
        page.run_box.describe_job(method.title if method else "", len(page.document.get("models") or []),
                                  page.output_edit.text().strip())
        if not page.recipe.has_inputs():
            self.validator.cancel()
            for label in (page.base_message, page.models_message, page.params_message, page.output_message):
                show_message(label, None)
            page.models_box.show_verdict(None)
            page.run_box.show_waiting("The estimate appears once the models are chosen.")
            return
        page.run_box.show_checking()
        if page.state.methods is None:  # the engine (torch) is loading: checked once it is there
            self.validator.cancel()
            return
        document = page.recipe.copy()
        device = page.device_combo.value() or "cpu"
        output = page.output_edit.text().strip()
        probe, replace = page.state.probe, page.overwrite_check.isChecked()
        self.validator.request(lambda: self._check(document, device, output, probe, replace))

    async def _check(self, document: dict[str, Any], device: str, output: str, probe: Any, replace: bool) -> None:
        self._show(await run_blocking(check_merge, document, device, output, probe, replace))

    def _show(self, result: Any) -> None:
        """Show a `MergeCheck`: each problem next to the field its key names, then the verdict and the estimate."""
        from guiapp.jobs.validation import Severity  # loaded by the check that produced `result`

        page = self.page
        page.output.refresh_capabilities(page.state.probe, page.document.get("out_dtype"), result.output_sizes)
        labels = {"method": page.method_message, "base": page.base_message, "models": page.models_message,
                  "params": page.params_message, "slices": page.slices_message, "output": page.output_message}
        shown: dict[QLabel, list[str]] = {label: [] for label in labels.values() if label is not page.method_message}
        worst: dict[QLabel, str] = {}
        for problem in result.problems:
            label = labels[FIELD_OF_KEY.get(str(problem.key[0]) if problem.key else "", "models")]
            shown.setdefault(label, []).append(problem.text)  # in the form's words once joined
            if problem.severity is Severity.ERROR or label not in worst:
                worst[label] = "problem" if problem.severity is Severity.ERROR else "warning"
        for label, texts in shown.items():
            show_message(label, self._words("\n".join(texts)) or None, worst.get(label, "problem"))
        page.models_box.show_verdict(result)
        problem = result.errors[0] if result.errors else None
        can_show, fix = self._offer_fix(problem.key, problem.message, page.recipe.copy(), problem.error) \
            if problem else (False, None)
        page.run_box.show_check(result, can_show, fix, self._words(problem.text) if problem else "")
        if result.compatible:  # the headers were read (a recipe error keeps the layers known so far)
            layer_chart.set_layer_count(result.layers)

    def _words(self, text: str) -> str:
        """A check's `text` as the window says it: the form's labels and the models' short names, no flag."""
        from guiapp.jobs.plain_words import recipe_words

        document = self.page.document
        references = [document.get("base_model"), document.get("tokenizer_source")]
        references += [entry.get("model") if isinstance(entry, dict) else entry
                       for entry in document.get("models") or []]
        output = self.page.output_edit.text().strip()  # its whole path is in the field above: the name is enough
        references += [output, str(expanded(output))] if output else []
        return recipe_words(for_window(text), self.page.method_box.method(), [str(r) for r in references if r])

    def block_on_yaml_problem(self, error: Any) -> None:
        """The YAML view holds a recipe that cannot be read: Run waits for it (it would run the last valid one),
        with "Show me" at the key's line and a fix when there is one."""
        self.validator.cancel()
        can_show, fix = self._offer_fix(getattr(error, "key", None) or (), error.message,
                                        RecipeDocument.written_mapping(self.page.recipe_panel.text()))
        self.page.run_box.action_bar.set_blocked(error_text(error), can_show, fix)

    def _offer_fix(self, key: Any, message: str, document: dict[str, Any] | None,
                   error: BaseException | None = None) -> tuple[bool, str | None]:
        """Remember the problem blocking Run and its one-click fix on `document` (None: no fix), or the free folder
        `error` suggests for a taken output; returns whether a control can be shown for it and the fix's label."""
        self._problem = (key, message)
        free = free_output(error, self.page.output_edit.text().strip())
        self._free_output = free[0] if free else None
        self._fix = fix_for(key, document, self.page.method_box.method()) if document is not None else None
        self._fix_document = document or {}
        label = free[1] if free else self._fix.label if self._fix else None
        return bool(key) and control_for(self.page, key, message) is not None, label

    def show_problem(self) -> bool:
        """Focus and outline the control that fixes the problem blocking Run; False when there is none."""
        return self._problem is not None and point_at(self.page, *self._problem)

    def fix_problem(self) -> None:
        """Make the offered one-click fix (one undo step), show the control it changed, and check again."""
        page = self.page
        if self._problem is not None and self._free_output:
            key = self._problem[0]
            page.output_edit.setText(self._free_output)  # checks again, which forgets the problem and its fix
            point_at(page, key, "")
            return
        if self._fix is None or self._problem is None:
            return
        key, fixed = self._problem[0], RecipeDocument(self._fix_document)
        self._fix.apply(fixed)
        page.apply_document(fixed.data)  # checks again, which forgets the problem and its fix
        point_at(page, key, "")
