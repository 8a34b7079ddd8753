"""The Try page with real widgets: models from the job just finished, text streaming into columns, Stop,
perplexity in a table and a chart, dtype dropdowns from the probe."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from tests.tryout.models import SENTENCES, write_causal, write_encoder

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def try_models(tmp_path_factory) -> list[Path]:
    import torch

    root = tmp_path_factory.mktemp("try-page")
    return [write_causal(root / "causal-a", torch.float32, seed=0), write_causal(root / "causal-b", torch.float16,
                                                                                  seed=1),
            write_causal(root / "causal-c", torch.bfloat16, seed=2)]


@pytest.fixture(scope="module")
def encoder_model(tmp_path_factory) -> Path:
    return write_encoder(tmp_path_factory.mktemp("try-page-encoder") / "encoder")


def _finished(qtbot, page, timeout=120_000) -> None:
    qtbot.waitUntil(lambda: page._key is None and page.status.text() in ("Done.", "Stopped.") or
                    (page._key is None and page.status.text() not in ("", "Starting…")), timeout=timeout)


def test_three_models_generate_side_by_side(qtbot, window, try_models):
    page = window.try_page
    window.show_page("try")
    page.set_models([str(m) for m in try_models])
    page.prompt.setPlainText("the cat sat on the")
    page.max_new_tokens.setValue(12)
    qtbot.mouseClick(page.generate_button, Qt.MouseButton.LeftButton)
    assert not page.generate_button.isEnabled() and page.stop.isEnabled()
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    assert len(page.columns) == 3
    assert all(column.text().strip() for column in page.columns)
    assert all("ran in" in column.status.text() for column in page.columns)
    record = window.state.jobs.records[-1]
    assert record.kind == "try" and [g["text"].strip() for g in record.summary["generations"]] == [
        column.text().strip() for column in page.columns]


def test_stop_cancels_generation(qtbot, window, try_models):
    page = window.try_page
    page.set_models([str(try_models[0])])
    page.prompt.setPlainText("the cat")
    page.max_new_tokens.setValue(8192)
    qtbot.mouseClick(page.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.columns[0].text().strip() != "", timeout=120_000)
    qtbot.mouseClick(page.stop, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Stopped.", timeout=60_000)
    assert window.state.jobs.records[-1].status == "cancelled" and page.generate_button.isEnabled()


def test_perplexity_fills_the_table_and_the_chart(qtbot, window, try_models, encoder_model, tmp_path):
    page = window.try_page
    page.tabs.setCurrentIndex(1)
    text_file = tmp_path / "text.jsonl"
    text_file.write_text("".join(f'{{"text": "{sentence}"}}\n' for sentence in SENTENCES))
    page.load_text_file(text_file)
    qtbot.waitUntil(lambda: page.text.toPlainText().startswith(SENTENCES[0]), timeout=20_000)
    page.set_models([str(try_models[0]), str(try_models[1])])
    qtbot.mouseClick(page.perplexity_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    assert page.table.rowCount() == 2
    values = [float(page.table.item(row, 1).text()) for row in range(2)]
    assert all(value > 1 for value in values)
    assert [round(v, 3) for _, v in page.chart.values] == [round(v, 3) for v in values]


def test_encoders_get_similarities_of_sentence_pairs(qtbot, window, encoder_model):
    page = window.try_page
    page.set_models([str(encoder_model)])
    page.text.setPlainText(f"{SENTENCES[0]}\t{SENTENCES[0]}")
    qtbot.mouseClick(page.perplexity_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    assert float(page.table.item(0, 1).text()) == pytest.approx(1.0, abs=1e-3)
    assert "similarity" in page.table.item(0, 2).text()


def test_a_failure_is_explained_on_the_page(qtbot, window, tmp_path):
    page = window.try_page
    page.set_models([str(tmp_path / "missing-model")])
    page.prompt.setPlainText("hello")
    qtbot.mouseClick(page.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page._key is None and page.status.text() not in ("", "Starting…"), timeout=60_000)
    assert "does not exist" in page.status.text() and page.generate_button.isEnabled()


def test_the_finished_jobs_inputs_and_output_are_offered(qtbot, window, models, tmp_path):
    from guiapp.jobs.specs import merge_job
    from guiapp.merging.recipe import parse_recipe

    recipe = parse_recipe(f"merge_method: linear\nmodels:\n"
                          f"  - model: {models.tune_a}\n    parameters: {{weight: 0.5}}\n"
                          f"  - model: {models.tune_b}\n    parameters: {{weight: 0.5}}\ndtype: float32\n")
    record = window.state.jobs.submit(merge_job(recipe, tmp_path / "merged"))
    qtbot.waitUntil(lambda: record.status == "done", timeout=120_000)
    qtbot.waitUntil(lambda: window.try_page.references()[-1:] == [str(tmp_path / "merged")], timeout=10_000)
    assert window.try_page.references() == [str(models.tune_a), str(models.tune_b), str(tmp_path / "merged")]


def test_dtype_dropdown_says_what_each_dtype_runs_as(shared_window):
    window = shared_window  # runs no job, so the module's shared window does (the tests that run use `window`)
    from guiapp.system.capabilities import inference_option

    combo = window.try_page.dtype
    labels = [combo.itemText(i) for i in range(combo.count())]
    assert labels[0] == "Each model's own dtype"
    float16 = inference_option(window.state.probe, "cpu", "float16")
    assert float16.label in labels


def test_temperature_and_top_p_reach_the_generation(qtbot, window, try_models):
    """Sampled with a chosen temperature and top-p, the page's text is what the engine writes with those settings
    (the defaults stay as before); for greedy decoding the sampling controls are disabled with the reason."""
    import torch

    from guiapp.inference.running import GenerationSettings, generate, load_model, resolve_sources
    from guiapp.inference.sampling import DEFAULT_TEMPERATURE, DEFAULT_TOP_P

    page = window.try_page
    assert (page.temperature.value(), page.top_p.value()) == (DEFAULT_TEMPERATURE, DEFAULT_TOP_P)
    assert not page.temperature.isEnabled() and "only when Sampled" in page.top_p.toolTip()
    page.set_models([str(try_models[0])])
    page.prompt.setPlainText("the cat sat on the")
    page.max_new_tokens.setValue(12)
    page.decoding.setCurrentIndex(page.decoding.findData(True))
    assert page.temperature.isEnabled() and page.top_p.isEnabled()
    page.seed.setValue(3)
    page.temperature.setValue(1.6)
    page.top_p.setValue(0.6)
    qtbot.mouseClick(page.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    record = window.state.jobs.records[-1]
    assert (record.spec["temperature"], record.spec["top_p"]) == (1.6, 0.6)
    settings = GenerationSettings(max_new_tokens=12, sample=True, seed=3, temperature=1.6, top_p=0.6)
    expected = generate(load_model(resolve_sources([str(try_models[0])])[0], torch.float32, "cpu"), "the cat sat on the",
                        settings)
    assert record.summary["generations"][0]["tokens"] == expected.token_ids


def test_the_device_dropdown_shows_the_whole_device_name(qtbot, shared_window):
    window = shared_window
    from PySide6.QtWidgets import QStyle, QStyleOptionComboBox

    window.resize(1360, 860)
    window.show_page("try")
    combo = window.try_page.device

    def room() -> int:
        option = QStyleOptionComboBox()
        combo.initStyleOption(option)
        return combo.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                            QStyle.SubControl.SC_ComboBoxEditField, combo).width()

    qtbot.waitUntil(lambda: combo.count() > 0 and combo.isVisible(), timeout=10_000)
    qtbot.waitUntil(lambda: room() >= combo.fontMetrics().horizontalAdvance(combo.currentText()), timeout=5_000)


def test_sample_models_say_they_are_untrained_where_their_output_appears(qtbot, window, try_models, tmp_path):
    from guiapp.jobs.demo import prepare_demo

    prepare_demo(tmp_path / "samples")
    sample = tmp_path / "samples" / "tiny-base"
    page = window.try_page
    window.show_page("try")
    page.set_models([str(sample), str(try_models[0])])
    page.prompt.setPlainText("hello")
    page.max_new_tokens.setValue(4)
    qtbot.mouseClick(page.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    assert "untrained" in page.columns[0].status.text() and "random" in page.columns[0].status.text()
    assert "untrained" not in page.columns[1].status.text()  # a model that is not a sample gets no such note

    page.text.setPlainText(" ".join(SENTENCES))
    qtbot.mouseClick(page.perplexity_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    assert "untrained" in page.table.item(0, 1).toolTip()
    assert not page.perplexity_note.isHidden() and "vocabulary size (256)" in page.perplexity_note.text()
    assert "tiny-base" in page.perplexity_note.text() and "causal-a" not in page.perplexity_note.text()


def test_generate_and_perplexity_show_their_time_before_they_run(qtbot, window, try_models):
    page = window.try_page
    window.show_page("try")
    page.tabs.setCurrentIndex(0)
    page.set_models([str(try_models[0])])
    page.prompt.setPlainText("the cat sat on the")
    page.max_new_tokens.setValue(12)
    qtbot.waitUntil(lambda: page.generate_estimate.text().startswith("Takes "), timeout=20_000)
    page.tabs.setCurrentIndex(1)
    page.text.setPlainText("\n".join(SENTENCES))
    qtbot.waitUntil(lambda: page.perplexity_estimate.text().startswith("Takes "), timeout=20_000)
    assert page.generate_estimate.text() == ""  # only the shown tab's job is estimated
    page.tabs.setCurrentIndex(0)
    qtbot.mouseClick(page.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    record = window.state.jobs.records[-1]
    assert record.kind == "try" and record.summary["estimate"]["text"]  # the Jobs page compares it with the time


def test_the_stages_shown_name_the_models_by_their_short_names(qtbot, window, try_models):
    page = window.try_page
    window.show_page("try")
    page.set_models([str(try_models[0])])
    page.prompt.setPlainText("the cat")
    page.max_new_tokens.setValue(4)
    seen: list[str] = []
    window.state.jobs.progress.connect(lambda _key, _event: seen.append(page.status.text()))
    qtbot.mouseClick(page.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "Done.", timeout=120_000)
    stages = [text for text in seen if text.startswith(("Generating", "Loading"))]
    assert any(text.startswith("Generating: causal-a") for text in stages), seen
    assert not any(str(try_models[0].parent) in text for text in seen), seen  # no local path
    assert str(try_models[0].parent) not in window.jobs.stage.text()


def test_a_hint_about_what_is_missing_goes_once_it_is_given(qtbot, shared_window, try_models):
    window = shared_window
    page = window.try_page
    window.show_page("try")
    page.set_models([])
    page.prompt.clear()
    qtbot.mouseClick(page.generate_button, Qt.MouseButton.LeftButton)
    assert page.status.text() == "Choose at least one model."
    page.pickers[0].set_text(str(try_models[0]))  # as choosing it in the list does
    assert page.status.text() == "Write a prompt first."  # what is still missing, not the model
    qtbot.keyClicks(page.prompt, "the cat")
    assert page.status.text() == ""
    page.tabs.setCurrentIndex(1)
    page.text.clear()
    qtbot.mouseClick(page.perplexity_button, Qt.MouseButton.LeftButton)
    assert page.status.text() == "Paste some text or open a file first."
    qtbot.keyClicks(page.text, "some words to score")
    assert page.status.text() == ""
