"""Plain words in the window: parameter labels (the recipe key in the tooltip), methods grouped by what the user
wants to do with a recommended one, "same for all layers / changes across layers", and plurals."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from guiapp.jobs.plain_words import grouped_methods
from guiapp.merging.method_schema import METHOD_GROUPS, ParamKind, ParamSpec
from guiapp.system.units import plural
from guiapp.ui.widgets.param_form import ParamEditor, ParamForm


def test_the_methods_come_in_groups_with_a_recommended_one(qtbot, window):
    combo = window.merge.method_combo
    texts = [combo.itemText(row) for row in range(combo.count())]
    headings = [row for row in range(combo.count()) if combo.itemData(row) is None]
    assert [texts[row] for row in headings] == [group.title for group in METHOD_GROUPS]
    assert texts[headings[0]] == "Combine fine-tunes of one base"
    assert texts[headings[0] + 1] == "TIES (ties) — recommended"
    assert combo.currentData() == "ties"  # a new recipe starts with the recommended method
    methods = [combo.itemData(row) for row in range(combo.count()) if combo.itemData(row) is not None]
    assert sorted(methods) == sorted(window.state.methods)  # all 20, each once
    # a heading can't be chosen: the keyboard steps over it
    combo.setFocus()
    combo.setCurrentIndex(headings[1] - 1)  # the last method of the first group
    qtbot.keyClick(combo, Qt.Key.Key_Down)
    assert combo.currentIndex() == headings[1] + 1
    assert combo.currentData() == "slerp" and "recommended" in combo.currentText()


def test_parameter_labels_are_plain_words_with_the_key_in_the_tooltip(qtbot):
    form = ParamForm()
    qtbot.addWidget(form)
    form.set_specs((ParamSpec("rescale", ParamKind.BOOL, default=True, help="Scale the kept changes up."),
                    ParamSpec("int8_mask", ParamKind.BOOL, default=False),
                    ParamSpec("lambda", ParamKind.FLOAT, default=1.0)))
    labels = {label.text(): label.toolTip() for label in form.findChildren(QLabel)}
    assert set(labels) == {"Rescale kept changes", "Save memory (int8 mask)", "Scale the result (λ)"}
    assert labels["Rescale kept changes"] == "Scale the kept changes up.\nRecipe key: rescale"
    assert "Recipe key: lambda" in form.editors["lambda"].toolTip()


def test_a_key_that_means_something_else_in_one_method_is_labelled_for_that_method(qtbot):
    # NearSwap's t is a closeness threshold, not SLERP's position between the models: labelled "Position between the
    # models", a user who set it to 0.5 for "halfway" would have swapped in nearly every entry of the other model.
    from guiapp.merging.methods import get_method

    # RAM's epsilon, likewise, is the size of a change that counts, not DELLA's spread of keep chances.
    form = ParamForm()
    qtbot.addWidget(form)
    for method, key, words in (("slerp", "t", "Position between the models (t) *"),
                               ("nearswap", "t", "Swap in differences up to (t) *"),
                               ("ram", "epsilon", "Counts as changed above (ε)"),
                               ("ramplus_tl", "epsilon", "Counts as changed above (ε)")):
        form.set_specs(get_method(method).global_params)
        labels = {label.buddy(): label.text() for label in form.findChildren(QLabel) if label.buddy() is not None}
        assert labels[form.editors[key].spin] == words
        assert form.editors[key].spin.accessibleName() == words.removesuffix(" *")
    della_epsilon = get_method("della").param("epsilon")
    assert ParamEditor(della_epsilon).spin.accessibleName() == "Spread of keep chances (ε)"


def test_a_gradient_is_a_choice_with_a_place_for_a_picture(qtbot, monkeypatch):
    pictures = []

    def picture(editor: ParamEditor) -> QWidget:
        view = QWidget()
        editor.gradient_changed.connect(lambda values: pictures.append(values))
        return view

    monkeypatch.setattr(ParamEditor, "gradient_view_factory", picture)
    editor = ParamEditor(ParamSpec("weight", ParamKind.FLOAT, default=0.6, per_model=True))
    qtbot.addWidget(editor)
    editor.show()
    assert editor.layers_choice.currentText() == "All layers" and not editor.gradient_view.isVisible()
    assert "Same for all layers" in editor.layers_choice.itemData(0, Qt.ItemDataRole.ToolTipRole)
    editor.layers_choice.setFocus()
    qtbot.keyClick(editor.layers_choice, Qt.Key.Key_Down)
    assert editor.layers_choice.currentText() == "Per layer"
    assert "Changes across layers" in editor.layers_choice.itemData(1, Qt.ItemDataRole.ToolTipRole)
    assert editor.gradient_view.isVisible() and editor.value() == [0.6, 0.6]
    assert pictures[-1] == [0.6, 0.6]
    with qtbot.waitSignal(editor.changed, timeout=5_000):
        editor.set_gradient([0.2, 0.5, 0.9])  # what a chart does when a point is dragged
    assert editor.value() == [0.2, 0.5, 0.9] and editor.text.text() == "[0.2, 0.5, 0.9]"


def test_a_method_is_offered_in_the_group_its_declaration_names_the_recommended_one_first():
    from dataclasses import replace

    from guiapp.merging.method_schema import STACK_LAYERS
    from guiapp.merging.methods import METHODS

    brand_new = replace(METHODS["linear"], name="brand_new", group=STACK_LAYERS)
    methods = {"linear": METHODS["linear"], "brand_new": brand_new, "ties": METHODS["ties"], "slerp": METHODS["slerp"]}
    assert [(g.title, names) for g, names in grouped_methods(methods)] == [
        ("Combine fine-tunes of one base", ["ties"]), ("Blend models", ["slerp", "linear"]),
        ("Stack layers", ["brand_new"])]


def test_plural():
    assert (plural(1, "model"), plural(0, "model"), plural(3, "model")) == ("1 model", "0 models", "3 models")
    assert plural(2, "match", "matches") == "2 matches"


def test_building_editors_opens_no_window_of_its_own(qtbot):
    """A control shown before it has a parent opens as a window of its own, if only for a moment, and takes the
    activation from the main window (whose keyboard shortcuts then stopped working)."""
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication

    class WindowsShown(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.shown: list[str] = []

        def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
            if event.type() == QEvent.Type.Show and isinstance(watched, QWidget) and watched.isWindow():
                self.shown.append(type(watched).__name__)
            return False

    spy = WindowsShown()
    QApplication.instance().installEventFilter(spy)
    try:
        for compact in (False, True):
            editor = ParamEditor(ParamSpec("weight", ParamKind.FLOAT, default=0.5, per_model=True), compact=compact)
            qtbot.addWidget(editor)
    finally:
        QApplication.instance().removeEventFilter(spy)
    assert spy.shown == []


def test_recipe_words_name_whole_references_only():
    from guiapp.jobs.plain_words import recipe_words

    text = "org/a-v2 differs from org/a. /m/tiny-math is 1.5 (tensor model.embed_tokens.weight)."
    assert recipe_words(text, None, ["org/a", "/m/tiny-math"]) == "org/a-v2 differs from a. tiny-math is 1.5."
