"""The LoRA page's checks before Run: models that do not pair up, and an adapter that is not one."""

from __future__ import annotations

from PySide6.QtCore import Qt


def test_models_that_do_not_pair_up_are_said_before_run(qtbot, window, models):
    page = window.lora
    page.x_base.set_text(str(models.base))
    page.x_model.set_text(str(models.wider))
    qtbot.waitUntil(lambda: "other shapes" in page.x_check.text(), timeout=20_000)
    assert "mlp" in page.x_check.text()
    assert page.x_check.property("status") == "problem"


def test_rank_modes_change_the_value_range(qtbot, window):
    page = window.lora
    page.rank_mode.setCurrentIndex(page.rank_mode.findData("energy"))
    assert (page.rank_value.minimum(), page.rank_value.maximum(), page.rank_value.value()) == (0.01, 1.0, 0.9)
    page.rank_mode.setCurrentIndex(page.rank_mode.findData("fixed"))
    assert page.rank_value.value() == 32 and page.rank_value.decimals() == 0


def test_a_folder_that_is_not_an_adapter_is_explained(qtbot, window, models):
    page = window.lora
    page.tabs.setCurrentIndex(1)
    page.a_base.set_text(str(models.base))
    page.a_adapter.set_text(str(models.tune_a))  # a full model, not an adapter
    qtbot.waitUntil(lambda: page.a_check.property("status") == "problem", timeout=20_000)
    assert "adapter" in page.a_check.text().lower()
    assert not page.a_run.isEnabled() and page.a_bar.status.text().startswith("Fix: ")  # Run says why not
    qtbot.mouseClick(page.a_run, Qt.MouseButton.LeftButton)
    assert not window.state.jobs.records  # a disabled Run starts nothing
    page.run_apply()  # running anyway (from code) fails with the explanation
    record = window.state.jobs.records[-1]
    qtbot.waitUntil(lambda: record.status == "failed", timeout=20_000)
    assert not window.jobs.explanation.isHidden()
