"""A recipe written with `modules:` (mergekit's form, also for text-only models) is checked and kept by the Merge
page: the form has no widgets for modules, so its edits must not turn the recipe into one with two model lists."""

from __future__ import annotations

import yaml


def test_modules_recipe_is_validated_and_survives_form_edits(qtbot, window, models):
    page = window.merge
    page.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "ties",
        "base_model": str(models.base),
        "modules": {"default": {"models": [
            {"model": str(models.tune_a), "parameters": {"weight": 0.5, "density": 0.5}},
            {"model": str(models.tune_b), "parameters": {"weight": 0.5, "density": 0.5}},
        ]}},
    }, sort_keys=False))
    qtbot.waitUntil(lambda: "Compatible" in page.compatibility.text(), timeout=20_000)
    page.param_form.editors["lambda"].spin.setValue(0.8)  # an edit in the form
    recipe = yaml.safe_load(page.yaml_edit.toPlainText())
    assert "models" not in recipe and "slices" not in recipe
    assert recipe["modules"]["default"]["models"][1]["model"] == str(models.tune_b)
    assert recipe["parameters"] == {"lambda": 0.8}
    qtbot.waitUntil(lambda: "Compatible" in page.compatibility.text(), timeout=20_000)
