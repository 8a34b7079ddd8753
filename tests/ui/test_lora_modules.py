"""The LoRA page's module choice: regular expressions are behind "Advanced", and the base model's own module
names (from its headers) can be ticked instead of typing one."""

from __future__ import annotations

import json
import re

from PySide6.QtCore import Qt

from tests.ui.conftest import wait_for_job


def test_ticking_module_names_limits_the_extraction(qtbot, window, models, tmp_path):
    page = window.lora
    window.show_page("lora")
    assert not page.extract.modules.include.isVisible()  # regular expressions are not the first thing a user meets
    page.extract.base.set_text(str(models.base))
    page.extract.model.set_text(str(models.tune_a))
    qtbot.mouseClick(page.extract.modules.modules_toggle, Qt.MouseButton.LeftButton)
    assert page.extract.modules.include.isVisible()
    qtbot.waitUntil(lambda: page.extract.modules.module_list.count() > 0, timeout=20_000)
    kinds = [page.extract.modules.module_list.item(row).data(Qt.ItemDataRole.UserRole) for row in range(page.extract.modules.module_list.count())]
    assert {"q_proj", "v_proj", "down_proj"} <= set(kinds)
    assert "2 matrices" in page.extract.modules.module_list.item(kinds.index("q_proj")).text()  # one per layer
    page.extract.modules.module_list.setFocus()
    for kind in ("q_proj", "v_proj"):
        page.extract.modules.module_list.setCurrentRow(kinds.index(kind))
        qtbot.keyClick(page.extract.modules.module_list, Qt.Key.Key_Space)
    pattern = page.extract.modules.include.text()
    assert re.search(pattern, "model.layers.1.self_attn.q_proj") and not re.search(pattern, "model.layers.1.mlp.up_proj")
    page.extract.out.setText(str(tmp_path / "only-attention"))
    record = window.state.jobs.record(page.extract.run())
    assert wait_for_job(qtbot, window, record.key).status == "done"
    assert record.spec["include"] == pattern
    targets = json.loads((tmp_path / "only-attention" / "adapter_config.json").read_text())["target_modules"]
    assert set(targets) <= {"q_proj", "v_proj"}
    # What it left out is said in the window's words, in the summary and in the job's log alike.
    window.show_page("jobs")
    window.jobs.select(record.key)
    for text in (window.jobs.summary.text(), window.jobs.log.toPlainText()):
        assert "left out by the module filters" in text and "--include" not in text, text
