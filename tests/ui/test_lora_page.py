"""The LoRA page's checks before Run: models that do not pair up, an adapter that is not one, a taken output folder."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt


@pytest.fixture
def window(shared_window):
    """The module's one window (`shared_window`: the LoRA forms as a fresh window shows them); the test that runs
    a job calls `make_window`."""
    return shared_window


def test_models_that_do_not_pair_up_are_said_before_run(qtbot, window, models):
    page = window.lora
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.wider))
    qtbot.waitUntil(lambda: "other shapes" in page.extract.check.text(), timeout=20_000)
    assert "mlp" in page.extract.check.text()
    assert page.extract.check.property("status") == "problem"


def test_rank_modes_change_the_value_and_its_allowed_range(qtbot, window):
    page = window.lora
    page.extract.rank_mode.setCurrentIndex(page.extract.rank_mode.findData("energy"))
    assert page.extract.rank_value.value() == 0.9 and page.extract.rank_value.decimals() == 3
    page.extract.rank_value.setValue(1.5)
    assert "between 0.01 and 1" in page.extract.rank_value.toolTip()
    page.extract.rank_mode.setCurrentIndex(page.extract.rank_mode.findData("fixed"))
    assert page.extract.rank_value.value() == 32 and page.extract.rank_value.decimals() == 0
    assert page.extract.rank_value.property("status") == ""


def _type_into(qtbot, box, text: str) -> None:
    box.setFocus()
    box.selectAll()
    qtbot.keyClicks(box, text)
    qtbot.keyClick(box, Qt.Key.Key_Tab)


def test_out_of_range_numbers_are_kept_as_typed_marked_and_block_run_with_the_nearest_value(qtbot, window, models,
                                                                                           tmp_path):
    page = window.lora
    window.show_page("lora")
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    page.extract.out.setText(str(tmp_path / "adapter"))
    qtbot.waitUntil(page.extract.run_button.isEnabled, timeout=20_000)
    page.extract.rank_mode.setCurrentIndex(page.extract.rank_mode.findData("energy"))
    _type_into(qtbot, page.extract.rank_value, "1.5")
    assert page.extract.rank_value.value() == 1.5  # kept as typed, not clamped to 1
    assert page.extract.rank_value.property("status") == "problem"
    assert not page.extract.run_button.isEnabled() and "between 0.01 and 1" in page.extract.bar.status.text()
    assert page.extract.bar.fix_button.isVisible() and page.extract.bar.fix_button.text() == "Use 1"
    qtbot.mouseClick(page.extract.bar.fix_button, Qt.MouseButton.LeftButton)
    assert page.extract.rank_value.value() == 1 and page.extract.rank_value.property("status") == ""
    qtbot.waitUntil(page.extract.run_button.isEnabled, timeout=20_000)
    page.extract.rank_mode.setCurrentIndex(page.extract.rank_mode.findData("fixed"))
    _type_into(qtbot, page.extract.rank_value, "5000")
    assert page.extract.rank_value.value() == 5000 and not page.extract.run_button.isEnabled()
    assert page.extract.bar.fix_button.text() == "Use 4096"

    page.tabs.setCurrentIndex(1)
    _type_into(qtbot, page.apply.scale, "20")
    assert page.apply.scale.value() == 20 and page.apply.scale.property("status") == "problem"
    assert "between -10 and 10" in page.apply.scale.toolTip()
    page.apply.base.set_text(str(models.base))
    page.apply.adapter.set_text(str(models.tune_a))  # not an adapter: that problem comes first once checked
    qtbot.waitUntil(lambda: page.apply.check.property("status") == "problem", timeout=20_000)
    assert not page.apply.run_button.isEnabled()


def test_a_folder_that_is_not_an_adapter_is_explained(qtbot, make_window, models):
    window = make_window()
    page = window.lora
    page.tabs.setCurrentIndex(1)
    page.apply.base.set_text(str(models.base))
    page.apply.adapter.set_text(str(models.tune_a))  # a full model, not an adapter
    qtbot.waitUntil(lambda: page.apply.check.property("status") == "problem", timeout=20_000)
    assert "adapter" in page.apply.check.text().lower()
    assert not page.apply.run_button.isEnabled() and page.apply.bar.status.text().startswith("Fix: ")  # Run says why not
    qtbot.mouseClick(page.apply.run_button, Qt.MouseButton.LeftButton)
    assert not window.state.jobs.records  # a disabled Run starts nothing
    page.apply.run()  # running anyway (from code) fails with the explanation
    record = window.state.jobs.records[-1]
    qtbot.waitUntil(lambda: record.status == "failed", timeout=20_000)
    assert not window.jobs.explanation.isHidden()


def _wait_blocked_on_taken(qtbot, bar, run):
    qtbot.waitUntil(lambda: bar.status.text().startswith("Fix:"), timeout=20_000)
    assert "already exists" in bar.status.text() and not run.isEnabled()


def test_a_taken_output_folder_blocks_extract_and_apply_with_a_new_name_to_click(qtbot, window, models, tmp_path):
    from guiapp.lora.extract import ExtractionSettings, extract_lora

    adapter = tmp_path / "adapter"
    extract_lora(ExtractionSettings(base=str(models.base), model=str(models.tune_a), out=adapter))
    page = window.lora
    window.show_page("lora")
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    page.extract.out.setText(str(adapter))  # the adapter just made is in the way
    _wait_blocked_on_taken(qtbot, page.extract.bar, page.extract.run_button)
    assert "pair up" in page.extract.check.text()  # the models are fine: only the folder is said, in the bar
    assert page.extract.bar.fix_button.text() == "Use a new name: adapter-2"
    qtbot.mouseClick(page.extract.bar.fix_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(page.extract.run_button.isEnabled, timeout=20_000)
    assert page.extract.out.text() == str(tmp_path / "adapter-2") and page.extract.bar.status.text() == "Ready."

    page.tabs.setCurrentIndex(1)
    (tmp_path / "applied").mkdir()
    page.apply.base.set_text(str(models.base))
    page.apply.adapter.set_text(str(adapter))
    page.apply.out.setText(str(tmp_path / "applied"))
    _wait_blocked_on_taken(qtbot, page.apply.bar, page.apply.run_button)
    assert "fits this base model" in page.apply.check.text()
    box = page.apply.overwrite
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))  # or replace it
    qtbot.waitUntil(page.apply.run_button.isEnabled, timeout=20_000)
    assert not window.state.jobs.records  # nothing ran to find any of this out


def test_apply_shows_its_time_like_extract(qtbot, window, models, tmp_path):
    from guiapp.lora.extract import ExtractionSettings, extract_lora

    adapter = tmp_path / "adapter"
    extract_lora(ExtractionSettings(base=str(models.base), model=str(models.tune_a), out=adapter))
    page = window.lora
    window.show_page("lora")
    page.tabs.setCurrentIndex(1)
    page.apply.base.set_text(str(models.base))
    page.apply.adapter.set_text(str(adapter))
    page.apply.out.setText(str(tmp_path / "applied"))
    qtbot.waitUntil(lambda: "Time: " in page.apply.estimate.text(), timeout=20_000)
    time = page.apply.estimate.text().split("Time: ", 1)[1].rstrip(".")
    assert page.apply.bar.summary.text().endswith(time)  # in the bar's summary too, as for Extract and Merge


def test_the_estimates_and_the_module_list_follow_the_models_chosen(qtbot, window, models):
    page = window.lora
    window.show_page("lora")
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    qtbot.waitUntil(lambda: page.extract.estimate.text().startswith("Reads"), timeout=20_000)
    qtbot.waitUntil(lambda: page.extract.modules.module_list.count() > 0, timeout=20_000)
    page.extract.model.set_text("")
    assert page.extract.estimate.text() == "Choose both models to see the estimate."  # not the old pair's
    page.extract.base.set_text("")
    assert page.extract.modules.module_list.count() == 0 and page.extract.modules.module_status.text().startswith("Choose the base model")

    page.tabs.setCurrentIndex(1)
    page.apply.base.set_text(str(models.base))
    page.apply.adapter.set_text(str(models.tune_a))  # not an adapter
    qtbot.waitUntil(lambda: page.apply.estimate.text().startswith("The estimate appears once"), timeout=20_000)
    page.apply.adapter.set_text("")
    assert page.apply.estimate.text() == "Choose the base model and the adapter to see the estimate."
