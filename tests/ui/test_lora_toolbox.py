"""The LoRA page's Resize and Combine tabs, driven as a user would: an adapter typed in, a size chosen, Run clicked;
the adapters written are PEFT adapters of the asked rank, and the report says what each module kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PySide6.QtCore import Qt

from tests.lora.peft_adapters import write_peft_adapter
from tests.tryout.models import write_causal
from tests.ui.conftest import wait_for_job


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("toolbox")
    base = write_causal(folder / "base", torch.float32, seed=3)
    return base, write_peft_adapter(base, folder / "a", seed=1, r=4), write_peft_adapter(base, folder / "b", seed=2, r=4)


def _type(qtbot, picker, text: str) -> None:
    editor = picker.combo.lineEdit()
    editor.setFocus()
    editor.selectAll()
    qtbot.keyClicks(editor, text)
    qtbot.keyClick(editor, Qt.Key.Key_Return)


def test_resize_writes_a_smaller_adapter_and_shows_what_each_module_kept(qtbot, window, adapters, tmp_path):
    _, adapter, _ = adapters
    window.show_page("lora")
    page = window.lora
    page.tabs.setCurrentWidget(page.resize_tab)
    tab = page.resize_tab
    _type(qtbot, tab.adapter, str(adapter))
    tab.value.setValue(2)
    tab.out.setText(str(tmp_path / "small"))
    qtbot.waitUntil(tab.run_button.isEnabled, timeout=30_000)
    assert "LoRA adapter of" in tab.check.text()
    qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    record = wait_for_job(qtbot, window, tab._job_key)
    assert record.status == "done", record.error
    config = json.loads((tmp_path / "small" / "adapter_config.json").read_text())
    assert config["r"] == 2
    qtbot.waitUntil(lambda: "mean rank 4" in tab.report.text() and "→ 2" in tab.report.text(), timeout=10_000)
    assert tab.report_chart.modules  # the same per-module chart the extraction's report has


def test_resize_refuses_a_folder_that_is_no_adapter_before_run(qtbot, window, adapters):
    base, _, _ = adapters
    tab = window.lora.resize_tab
    window.lora.tabs.setCurrentWidget(tab)
    _type(qtbot, tab.adapter, str(base))
    qtbot.waitUntil(lambda: tab.check.property("status") == "problem", timeout=30_000)
    assert not tab.run_button.isEnabled()


def test_combine_stacks_two_adapters_into_one_of_their_summed_rank(qtbot, window, adapters, tmp_path):
    _, first, second = adapters
    page = window.lora
    page.tabs.setCurrentWidget(page.combine)
    tab = page.combine
    for adapter in (first, second):
        _type(qtbot, tab.picker, str(adapter))
        qtbot.mouseClick(tab.add_button, Qt.MouseButton.LeftButton)
    assert tab.adapters() == [str(first), str(second)]
    tab.method.setCurrentIndex(tab.method.findData("cat"))
    assert tab.bar.summary.text().startswith("2 adapters stacked")  # in words, not PEFT's "cat"
    tab.table.cellWidget(1, 1).setValue(0.5)
    tab.method.setCurrentIndex(tab.method.findData("cat"))
    tab.out.setText(str(tmp_path / "both"))
    qtbot.waitUntil(tab.run_button.isEnabled, timeout=30_000)
    qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    record = wait_for_job(qtbot, window, tab._job_key)
    assert record.status == "done", record.error
    assert record.spec["weights"] == [1.0, 0.5]
    assert json.loads((tmp_path / "both" / "adapter_config.json").read_text())["r"] == 8
    qtbot.waitUntil(lambda: "2 adapters combined (cat)" in tab.report.text(), timeout=10_000)


def test_ties_blocks_run_on_a_density_out_of_range_with_its_fix(qtbot, window, adapters):
    _, first, second = adapters
    tab = window.lora.combine
    window.lora.tabs.setCurrentWidget(tab)
    for adapter in (first, second):
        tab.add_adapter(str(adapter))
    tab.method.setCurrentIndex(tab.method.findData("ties"))
    tab.density.setValue(1.5)
    qtbot.waitUntil(lambda: not tab.bar.fix_button.isHidden(), timeout=30_000)
    assert not tab.run_button.isEnabled() and "Density is 1.5" in tab.bar.status.text()
    qtbot.mouseClick(tab.bar.fix_button, Qt.MouseButton.LeftButton)
    assert tab.density.value() == 1


def test_the_wheel_passing_over_a_weight_or_the_rank_changes_nothing(qtbot, window, adapters):
    from tests.ui.test_wheel_guard import wheel

    _, first, second = adapters
    window.show_page("lora")
    tab = window.lora.combine
    window.lora.tabs.setCurrentWidget(tab)
    for adapter in (first, second):
        tab.add_adapter(str(adapter))
    window.nav.setFocus()
    weight = tab.table.cellWidget(0, 1)
    wheel(weight, 3)
    assert weight.value() == 1.0
    resize = window.lora.resize_tab
    window.lora.tabs.setCurrentWidget(resize)
    window.nav.setFocus()
    wheel(resize.value, 3)
    assert resize.value.value() == 8
