"""The small pieces the window is built from, each on its own: the parameter editor and form, the option
dropdown, and the background-call helpers."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import Qt, QThread

from guiapp.merging.method_schema import ParamKind, ParamSpec
from guiapp.ui import background
from guiapp.ui.background import LatestCall, call_in_background
from guiapp.ui.widgets.options import Choice, OptionCombo
from guiapp.ui.widgets.param_form import SLIDER_STEPS, ParamEditor, ParamForm

WEIGHT = ParamSpec("weight", ParamKind.FLOAT, default=1.0, per_model=True, help="How much of this model")
DENSITY = ParamSpec("density", ParamKind.FLOAT, default=1.0, minimum=0.0, maximum=1.0, per_model=True)
NORMALIZE = ParamSpec("normalize", ParamKind.BOOL, default=True)
ITERATIONS = ParamSpec("max_iter", ParamKind.INT, default=10, minimum=1, maximum=1000)


@pytest.fixture
def editor(qtbot, monkeypatch):
    # Editors on their own, without the chart a window installs for every editor (a list is then shown as typed).
    monkeypatch.setattr(ParamEditor, "gradient_view_factory", None)

    def make(spec: ParamSpec) -> ParamEditor:
        widget = ParamEditor(spec)
        qtbot.addWidget(widget)
        widget.show()
        return widget

    return make


def test_an_untouched_editor_leaves_the_default_to_the_method(editor):
    density = editor(DENSITY)
    assert density.value() is None and density.spin.value() == 1.0
    assert density.slider.value() == SLIDER_STEPS


def test_the_slider_and_the_box_move_together_and_report_a_change(qtbot, editor):
    density = editor(DENSITY)
    with qtbot.waitSignal(density.changed, timeout=10_000):
        density.slider.setValue(SLIDER_STEPS // 4)
    assert density.spin.value() == pytest.approx(0.25) and density.value() == pytest.approx(0.25)
    with qtbot.waitSignal(density.changed, timeout=10_000):
        density.spin.setValue(0.5)
    assert density.slider.value() == SLIDER_STEPS // 2 and density.value() == 0.5


def test_showing_a_value_from_a_recipe_is_not_a_change(qtbot, editor):
    density = editor(DENSITY)
    with qtbot.assertNotEmitted(density.changed):
        density.set_value(0.3)
    assert density.value() == 0.3 and density.slider.value() == round(0.3 * SLIDER_STEPS)
    density.set_value(None)
    assert density.value() is None


def test_a_list_value_is_entered_as_yaml_and_a_bad_one_is_kept_as_typed(qtbot, editor):
    weight = editor(WEIGHT)
    weight.layers_choice.setFocus()
    qtbot.keyClick(weight.layers_choice, Qt.Key.Key_Down)  # changes across layers
    assert weight.varies_by_layer()
    assert weight.text.isVisible() and not weight.spin.isVisible()
    assert weight.value() == [1.0, 1.0]  # starts from the number shown, as a gradient
    weight.text.clear()
    qtbot.keyClicks(weight.text, "[{filter: mlp, value: 0.5}, {value: 0.3}]")
    assert weight.value() == [{"filter": "mlp", "value": 0.5}, {"value": 0.3}]
    weight.text.clear()
    qtbot.keyClicks(weight.text, "[0.1, ")
    assert weight.value() == "[0.1, "  # planning reports it next to the models, in its own words


def test_booleans_and_integers_keep_their_kind(qtbot, editor):
    normalize = editor(NORMALIZE)
    qtbot.mouseClick(normalize.check, Qt.MouseButton.LeftButton)
    assert normalize.value() is False
    iterations = editor(ITERATIONS)
    iterations.spin.setValue(25)
    assert iterations.value() == 25 and isinstance(iterations.value(), int)


def test_the_form_writes_only_what_the_user_set(qtbot):
    form = ParamForm()
    qtbot.addWidget(form)
    form.set_specs((NORMALIZE, ITERATIONS))
    assert set(form.editors) == {"normalize", "max_iter"} and form.values() == {}
    with qtbot.waitSignal(form.changed, timeout=10_000):
        form.editors["max_iter"].spin.setValue(50)
    assert form.values() == {"max_iter": 50}
    form.set_values({"normalize": False})
    assert form.values() == {"normalize": False}
    form.set_specs(())
    assert form.editors == {} and form.values() == {}


CHOICES = [Choice("cpu", "CPU"), Choice("cuda:0", "GPU (not available: no driver)", False, "no driver"),
           Choice("xpu:0", "Intel GPU")]


def test_an_impossible_choice_stays_visible_but_cannot_be_picked(qtbot):
    combo = OptionCombo()
    qtbot.addWidget(combo)
    combo.set_choices(CHOICES)
    assert combo.count() == 3 and combo.value() == "cpu"
    assert not combo.select("cuda:0") and combo.value() == "cpu"
    assert not combo.is_enabled_choice("cuda:0") and combo.is_enabled_choice("xpu:0")
    assert combo.model().item(1).toolTip() == "no driver"


def test_the_pick_survives_new_choices_and_falls_back_when_it_goes(qtbot):
    combo = OptionCombo()
    qtbot.addWidget(combo)
    combo.set_choices(CHOICES)
    with qtbot.assertNotEmitted(combo.choice_changed):  # only the user's picks are reported
        assert combo.select("xpu:0")
        combo.set_choices(list(reversed(CHOICES)))
    assert combo.value() == "xpu:0"
    combo.set_choices([Choice("cpu", "CPU"), Choice("xpu:0", "Intel GPU", False, "gone")])
    assert combo.value() == "cpu"


def test_a_user_pick_is_reported_and_skips_disabled_entries(qtbot):
    combo = OptionCombo()
    qtbot.addWidget(combo)
    combo.set_choices(CHOICES)
    combo.show()
    combo.setFocus()
    with qtbot.waitSignal(combo.choice_changed, timeout=10_000) as picked:
        qtbot.keyClick(combo, Qt.Key.Key_Down)
    assert picked.args == ["xpu:0"] and combo.value() == "xpu:0"


def test_a_background_call_answers_on_the_ui_thread(qtbot):
    ui_thread, seen = QThread.currentThread(), []

    def work() -> str:
        seen.append(threading.current_thread() is threading.main_thread())
        return "answer"

    answers = []
    call_in_background(work, lambda value: answers.append((value, QThread.currentThread() is ui_thread)))
    qtbot.waitUntil(lambda: bool(answers), timeout=30_000)
    assert answers == [("answer", True)] and seen == [False]


def test_a_background_failure_reaches_the_error_callback(qtbot):
    errors = []

    def fail() -> None:
        raise OSError("the disk went away")

    call_in_background(fail, lambda value: pytest.fail("no result expected"), errors.append)
    qtbot.waitUntil(lambda: bool(errors), timeout=30_000)
    assert isinstance(errors[0], OSError) and "went away" in str(errors[0])


def test_only_the_newest_request_is_answered(qtbot):
    latest = LatestCall(10)
    running, release, calls, answers = threading.Event(), threading.Event(), [], []

    def slow(name: str):
        def call() -> str:
            calls.append(name)
            running.set()
            assert release.wait(30)
            return name

        return call

    latest.request(slow("first"), answers.append)
    qtbot.waitUntil(running.is_set, timeout=30_000)  # the first call runs on its thread
    latest.request(slow("second"), answers.append)  # a newer request: the first one's answer is now stale
    latest.request(slow("third"), answers.append)  # within the delay: replaces "second" before it starts
    release.set()
    qtbot.waitUntil(lambda: calls == ["first", "third"] and _all_delivered(), timeout=30_000)
    assert answers == ["third"]


def test_a_cancelled_request_is_never_answered(qtbot):
    latest = LatestCall(10)
    running, release, answers = threading.Event(), threading.Event(), []

    def call() -> str:
        running.set()
        assert release.wait(30)
        return "late"

    latest.request(call, answers.append)
    qtbot.waitUntil(running.is_set, timeout=30_000)
    latest.cancel()
    release.set()
    qtbot.waitUntil(_all_delivered, timeout=30_000)
    assert answers == []


def _all_delivered() -> bool:
    """Every background call has finished and its answer has been through the UI thread (or dropped there)."""
    return not background._pending


TOLERANCE = ParamSpec("eps", ParamKind.FLOAT, default=1e-8, minimum=0.0, maximum=0.01)  # multislerp's
THRESHOLD = ParamSpec("t", ParamKind.FLOAT, required=True, minimum=0.0, suggested=0.0001)  # NearSwap's


def type_number(qtbot, editor: ParamEditor, text: str) -> None:
    box = editor.spin.lineEdit()
    box.setFocus()
    box.selectAll()
    qtbot.keyClicks(box, text)
    qtbot.keyClick(box, Qt.Key.Key_Return)


@pytest.mark.parametrize(("spec", "typed", "expected"), [
    (TOLERANCE, "0.00000002", 2e-8),  # a tiny default: kept to its last digit, not rounded to 0
    (THRESHOLD, "0.00005", 5e-5),  # no default, a tiny suggested value: the box takes values below it
])
def test_a_tiny_value_typed_in_the_box_reaches_the_recipe_whole(qtbot, editor, spec, typed, expected):
    widget = editor(spec)
    type_number(qtbot, widget, typed)
    assert widget.value() == pytest.approx(expected, rel=1e-9)


def test_the_slider_of_a_tiny_parameter_moves_by_powers_of_ten(qtbot, editor):
    threshold = editor(THRESHOLD)  # usually 1e-4: the slider spans 1e-6 to 1e-2, a power of ten per quarter
    assert "0.000001 to 0.01, a power of ten at a time" in threshold.slider.toolTip()
    threshold.slider.setValue(SLIDER_STEPS // 2)
    assert threshold.value() == pytest.approx(1e-4)
    threshold.slider.setValue(SLIDER_STEPS // 4)
    assert threshold.value() == pytest.approx(1e-5)
    type_number(qtbot, threshold, "0.001")
    assert threshold.slider.value() == SLIDER_STEPS * 3 // 4
    type_number(qtbot, threshold, "0")  # below the slider's span: the box keeps it, the slider rests at its start
    assert threshold.value() == 0 and threshold.slider.value() == 0


def test_an_explanation_read_back_from_the_history_shows_the_window_words(qtbot):
    """The job history keeps an explanation as JSON: the window's words travel with it, so the panel shows them
    without rewriting the command line's."""
    import json
    from dataclasses import asdict

    from huggingface_hub import errors as hf

    from guiapp.hub.failures import translate
    from guiapp.system.explain import explain
    from guiapp.ui.widgets.explanation import ExplanationPanel

    saved = json.loads(json.dumps(asdict(explain(translate(hf.OfflineModeIsEnabled("offline"), "org/model")))))
    assert "HF_HUB_OFFLINE" in saved["fix"] + saved["what"]
    panel = ExplanationPanel()
    qtbot.addWidget(panel)
    panel.show_explanation(saved)
    shown = panel.what.text() + panel.fix.text()
    assert "Go online, or use a model that is already downloaded." in shown and "HF_HUB_OFFLINE" not in shown
