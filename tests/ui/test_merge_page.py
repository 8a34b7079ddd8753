"""The Merge page: form → YAML, YAML → form, validation next to the fields, capability-fed dropdowns."""

from __future__ import annotations

import math
import os

import pytest
import yaml
from PySide6.QtCore import Qt

from tests.ui.conftest import broken_float16


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`): these tests edit the Merge page's recipe, which it puts back;
    the one that needs another probe calls `make_window`."""
    return shared_window


def _set_method(qtbot, page, name):
    page.method_combo.setCurrentIndex(page.method_combo.findData(name))


def _yaml(page):
    return yaml.safe_load(page.yaml_edit.toPlainText())


def test_form_builds_the_recipe_yaml(qtbot, window, models):
    page = window.merge
    _set_method(qtbot, page, "ties")
    assert "sign" in page.method_box.method_summary.text()
    assert "arxiv.org/abs/2306.01708" in page.method_box.method_paper.text()
    page.base_picker.set_text(str(models.base))
    for model in (models.tune_a, models.tune_b):
        qtbot.keyClicks(page.add_model_picker.combo.lineEdit(), str(model))
        qtbot.mouseClick(page.add_model_button, Qt.MouseButton.LeftButton)
    # exactly the per-model controls ties declares, in the table's header
    headers = [page.table.horizontalHeaderItem(c).text() for c in range(page.table.columnCount())]
    assert headers == ["Model", "Weight", "Keep this fraction of changes", ""]  # plain words; the key in the tip
    assert "Recipe key: density" in page.table.horizontalHeaderItem(2).toolTip()
    weight = page.table.cellWidget(1, 1)
    weight.spin.setValue(0.25)
    assert weight.slider.value() == 250  # the slider follows the number
    page.param_form.editors["lambda"].spin.setValue(0.8)
    recipe = _yaml(page)
    assert recipe["merge_method"] == "ties"
    assert recipe["base_model"] == str(models.base)
    assert [m["model"] for m in recipe["models"]] == [str(models.tune_a), str(models.tune_b)]
    assert recipe["models"][1]["parameters"]["weight"] == 0.25
    assert recipe["models"][0]["parameters"]["density"] == 1.0
    assert recipe["parameters"] == {"lambda": 0.8}
    # the plan is checked off the UI thread and its verdict appears before Run
    qtbot.waitUntil(lambda: "Compatible" in page.compatibility.text(), timeout=20_000)
    assert "3 models" in page.compatibility.text()
    assert "Reads" in page.estimate.text()
    assert "Time: about" in page.estimate.text() or "Time: under a second." in page.estimate.text()
    assert page.fit_label.text().startswith("Fits in RAM")


def test_editing_the_yaml_updates_the_form(qtbot, window, models):
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "dare_ties",
        "base_model": str(models.base),
        "models": [
            {"model": str(models.tune_a), "parameters": {"weight": 0.7, "density": [0.2, 0.9]}},
            {"model": str(models.tune_b), "parameters": {"weight": 0.3, "density": 0.5}},
        ],
        "parameters": {"normalize": False},
        "out_dtype": "float32",
        "chat_template": "auto",
    }, sort_keys=False))
    qtbot.waitUntil(lambda: page.method_combo.currentData() == "dare_ties", timeout=5_000)
    assert page.base_picker.text() == str(models.base)
    assert page.table.rowCount() == 2
    assert page.table.cellWidget(0, 0).text() == str(models.tune_a)
    density = page.table.cellWidget(0, 2)
    assert density.varies_by_layer() and density.value() == [0.2, 0.9]  # a gradient across layers
    assert page.table.cellWidget(1, 1).spin.value() == 0.3
    assert page.param_form.editors["normalize"].check.isChecked() is False
    assert page.dtype_combo.value() == "float32"
    # a form edit now keeps what the YAML said, including keys the form has no widget for
    page.table.cellWidget(1, 1).spin.setValue(0.4)
    recipe = _yaml(page)
    assert recipe["models"][1]["parameters"]["weight"] == 0.4
    assert recipe["models"][0]["parameters"]["density"] == [0.2, 0.9]
    assert recipe["chat_template"] == "auto"


def test_bad_yaml_is_explained_next_to_the_editor(qtbot, window):
    page = window.merge
    before = page.method_combo.currentData()
    page.yaml_edit.setPlainText("merge_method: ties\nmodels:\n  - model: a\n   parameters: {weight: 1}\n")
    qtbot.waitUntil(lambda: not page.yaml_message.isHidden(), timeout=5_000)
    assert "not valid YAML (line" in page.yaml_message.text()
    assert page.method_combo.currentData() == before  # the form keeps its last good state


def test_incompatible_models_are_reported_next_to_the_models(qtbot, window, models):
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "linear",
        "models": [{"model": str(models.base), "parameters": {"weight": 0.5}},
                   {"model": str(models.wider), "parameters": {"weight": 0.5}}],
    }))
    qtbot.waitUntil(lambda: "Not compatible" in page.compatibility.text(), timeout=20_000)
    assert not page.models_message.isHidden()
    assert "mlp" in page.models_message.text()  # names the tensor whose shapes differ
    assert page.run_message.text().startswith("Fix: ") and not page.run_button.isEnabled()


def test_out_of_range_parameter_is_reported_next_to_the_parameters(qtbot, window, models):
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "karcher",
        "models": [{"model": str(models.base)}, {"model": str(models.tune_a)}],
        "parameters": {"tol": -1.7},
    }))
    qtbot.waitUntil(lambda: not page.params_message.isHidden(), timeout=20_000)
    # in the form's words: the parameter's label, not its recipe key
    assert "“Stop when steps are this small”" in page.params_message.text() and "-1.7" in page.params_message.text()


def test_dtype_dropdown_disables_what_the_probe_says_fails(qtbot, make_window, probed, models):
    window = make_window(broken_float16(probed))
    page = window.merge
    model = page.dtype_combo.model()
    rows = {model.item(r).data(Qt.ItemDataRole.UserRole): model.item(r) for r in range(model.rowCount())}
    assert not rows["float16"].isEnabled()
    assert "not implemented for 'Half'" in rows["float16"].toolTip()
    assert "not available" in rows["float16"].text()
    assert rows["bfloat16"].isEnabled() and "computed in float32" in rows["bfloat16"].toolTip()
    # a recipe asking for it says why, next to the dropdown, instead of failing later
    page.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "linear", "out_dtype": "float16",
        "models": [{"model": str(models.tune_a), "parameters": {"weight": 1.0}}],
    }))
    qtbot.waitUntil(lambda: "cannot be used on cpu" in page.dtype_note.text(), timeout=5_000)
    assert "Half" in page.dtype_note.text()


def test_import_and_export_recipe_files(qtbot, window, models, tmp_path):
    page = window.merge
    source = tmp_path / "in.yml"
    source.write_text(yaml.safe_dump({"merge_method": "task_arithmetic", "base_model": str(models.base),
                                      "models": [{"model": str(models.tune_a), "parameters": {"weight": 0.5}}]}))
    page.import_recipe(str(source))
    assert page.method_combo.currentData() == "task_arithmetic"
    assert page.table.rowCount() == 1
    target = tmp_path / "out.yml"
    page.export_recipe(str(target))
    assert yaml.safe_load(target.read_text()) == _yaml(page)
    assert _yaml(page)["models"][0]["parameters"]["weight"] == 0.5


@pytest.mark.parametrize("kind", ["fifo", "weights", "latin-1"])
def test_importing_a_file_that_is_not_a_recipe_says_so_and_keeps_the_recipe(qtbot, window, models, tmp_path, kind):
    """A pipe would freeze the window (read on the UI thread); binary data raised UnicodeDecodeError."""
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "linear", "models": [{"model": str(models.base)}]}))
    before = page.yaml_edit.toPlainText()
    chosen = tmp_path / "chosen.yml"
    if kind == "fifo":
        os.mkfifo(chosen)
    elif kind == "weights":
        chosen.write_bytes((models.base / "model.safetensors").read_bytes())
    else:
        chosen.write_bytes("merge_method: linéar\n".encode("latin-1"))
    page.import_recipe(str(chosen))
    assert "Cannot open it" in page.yaml_message.text(), page.yaml_message.text()
    assert page.yaml_edit.toPlainText() == before


def test_the_models_tables_headers_are_not_cut_at_the_default_width(qtbot, window, models):
    window.resize(1360, 860)
    window.show_page("merge")
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({"merge_method": "ties", "base_model": str(models.base), "models": [
        {"model": str(models.tune_a), "parameters": {"weight": 0.5, "density": 0.5}},
        {"model": str(models.tune_b), "parameters": {"weight": 0.5, "density": 0.5}}]}))
    qtbot.waitUntil(lambda: page.table.rowCount() == 2, timeout=10_000)
    header = page.table.horizontalHeader()
    for column in range(1, page.table.columnCount() - 1):  # the values' columns ("Keep this fraction of changes")
        text = page.table.horizontalHeaderItem(column).text()
        assert header.sectionSize(column) >= header.sectionSizeHint(column), text
    assert header.length() <= page.table.viewport().width()  # and the table still fits without scrolling sideways


def test_output_dtypes_show_the_outputs_size_and_the_recommendation(qtbot, window, models):
    from safetensors import safe_open

    from guiapp.system.units import format_bytes

    with safe_open(str(models.tune_a / "model.safetensors"), "pt") as weights:
        elements = sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "linear",
        "models": [{"model": str(models.tune_a), "parameters": {"weight": 0.5}},
                   {"model": str(models.tune_b), "parameters": {"weight": 0.5}}],
    }))
    model = page.dtype_combo.model()

    def labels() -> dict:
        return {model.item(r).data(Qt.ItemDataRole.UserRole): model.item(r).text() for r in range(model.rowCount())}

    qtbot.waitUntil(lambda: "—" in labels().get("float32", ""), timeout=20_000)
    assert labels()["bfloat16"] == f"bfloat16 — {format_bytes(2 * elements)} (recommended)"
    assert labels()["float32"] == f"float32 — {format_bytes(4 * elements)}"
    assert labels()["float16"].startswith(f"float16 — {format_bytes(2 * elements)}")


def test_the_form_is_there_before_the_engine_and_gives_way_to_the_reason_when_it_cannot_load(qtbot):
    from guiapp.ui.app import create_window

    _, window = create_window([])  # the engine is not loading: the form comes from the declarations alone
    qtbot.addWidget(window)
    window.show()
    page = window.merge
    assert page.stack.currentWidget() is not page.loading
    assert page.method_combo.findData("della") >= 0 and not page.run_button.isEnabled()
    window.state.methods_failed.emit(ImportError("No module named 'torch'"))  # as the background loader reports it
    assert page.stack.currentWidget() is page.loading
    assert "The merge engine could not be loaded." in page.loading.text()
