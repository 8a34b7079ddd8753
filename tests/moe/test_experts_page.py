"""The Experts page driven with real clicks and keys: the form waits for what is missing, refuses an expert that
does not fit the base before Run, and runs the assembly through the job runner into a model transformers loads."""

from __future__ import annotations

import json

import pytest
import torch
from PySide6.QtCore import Qt

from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.ui.pages.jobs import summary_text
from tests.ui.conftest import isolated_settings, make_window, wait_for_job, window  # noqa: F401 - the window as tests/ui has it

pytest.importorskip("transformers")


def _type(qtbot, widget, text: str) -> None:
    widget.setFocus()
    qtbot.keyClicks(widget, text)


def _fill(qtbot, page, models, tmp_path) -> None:
    page.base.set_text(str(models["base"]))
    prompts = (["add two numbers"], ["write a poem about the sea"])
    for box, name, positive in zip(page.experts[:2], ("e0", "e1"), prompts, strict=True):
        box.model.set_text(str(models[name]))
        _type(qtbot, box.positive, positive[0])
    page.out.clear()
    _type(qtbot, page.out, str(tmp_path / "moe"))


@pytest.mark.slow
def test_the_form_assembles_an_moe_model_through_the_job_runner(qtbot, make_window, moe_models, tmp_path):
    window = make_window()
    window.show_page("experts")
    page = window.experts
    assert "Choose the base model" in page.bar.status.text() and not page.run_button.isEnabled()
    page.routing.setCurrentIndex(page.routing.findData("cheap_embed"))
    assert "words" in page.routing_words.text()
    _fill(qtbot, page, moe_models, tmp_path)
    qtbot.waitUntil(page.run_button.isEnabled, timeout=30_000)
    assert "Mixtral model with 2 experts, 2 per token" in page.bar.summary.text()
    qtbot.mouseClick(page.add_button, Qt.MouseButton.LeftButton)
    assert len(page.experts) == 3 and "Choose a model for every expert" in page.bar.status.text()
    qtbot.mouseClick(page.experts[2].remove, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(page.run_button.isEnabled, timeout=30_000)
    page.per_token.setFocus()
    qtbot.keyClick(page.per_token, Qt.Key.Key_Down)
    assert page.per_token.value() == 1
    qtbot.waitUntil(page.run_button.isEnabled, timeout=30_000)
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    assert window.current_page() == "jobs"
    record = wait_for_job(qtbot, window, window.state.jobs.records[-1].key)
    assert record.status == "done" and record.title == "Assemble experts → moe"
    assert summary_text(record).endswith("a Mixtral model with 2 experts.")
    config = json.loads((tmp_path / "moe" / "config.json").read_text())
    assert (config["architectures"], config["num_experts_per_tok"]) == (["MixtralForCausalLM"], 1)
    import transformers

    model = transformers.MixtralForCausalLM.from_pretrained(tmp_path / "moe", trust_remote_code=False)
    assert torch.isfinite(model(torch.tensor([[1, 4, 5]])).logits).all()


def test_an_expert_that_does_not_fit_the_base_blocks_run_with_the_reason(qtbot, window, moe_models, tmp_path):
    stranger = write_llama(tmp_path / "stranger", LlamaShape(hidden=48, intermediate=64, layers=2, vocab=23),
                           dtype=torch.float32)
    window.show_page("experts")
    page = window.experts
    _fill(qtbot, page, moe_models, tmp_path)
    page.experts[1].model.set_text(str(stranger))
    qtbot.waitUntil(lambda: "Fix:" in page.bar.status.text(), timeout=30_000)
    assert "do not all fit the base model" in page.bar.status.toolTip() + page.bar.status.text()
    assert not page.run_button.isEnabled()


def test_the_form_is_back_after_a_restart(qtbot, make_window, moe_models, tmp_path):
    from guiapp.ui.app import create_window

    window = make_window()
    page = window.experts
    qtbot.mouseClick(page.add_button, Qt.MouseButton.LeftButton)
    _fill(qtbot, page, moe_models, tmp_path)
    page.experts[2].model.set_text(str(moe_models["e2"]))
    _type(qtbot, page.experts[2].negative, "story")
    page.routing.setCurrentIndex(page.routing.findData("random"))
    window.close()
    _, again = create_window([])
    qtbot.addWidget(again)
    restored = again.experts
    assert restored.document() == page.document() and restored.out.text() == str(tmp_path / "moe")
    assert restored.routing.currentData() == "random" and len(restored.experts) == 3
    again.state.jobs.shutdown(10)
