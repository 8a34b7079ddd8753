""""Export for LM Studio / Ollama…" with real widgets and the real job runner: sizes for this model, the export
with its progress, then the file, the Modelfile beside it and the check's result; and the Jobs page's button."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gguf
import pytest
from PySide6.QtCore import Qt


@pytest.fixture
def state(qtbot, tmp_path, monkeypatch):
    from guiapp.ui.job_bridge import JobBridge

    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(tmp_path / "config"))
    bridge = JobBridge(keep_history=False)
    yield SimpleNamespace(jobs=bridge)
    bridge.shutdown(10)


def test_export_from_the_dialog_writes_the_file_a_modelfile_and_checks_it(qtbot, state, tiny_models, tmp_path):
    import shutil

    from guiapp.ui.gguf_export_dialog import GgufExportDialog

    folder = tmp_path / "merged"
    shutil.copytree(tiny_models["llama"], folder)
    dialog = GgufExportDialog(state, folder)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.status.text() == "Ready.", timeout=60_000)
    words = {button.objectName(): button.text() for button in dialog.kinds.buttons()}
    assert words["q4_k_m"] == "Q4_K_M — 826 KB: runs on most laptops; a little less accurate"
    assert dialog.chosen_kind() == "q4_k_m" and dialog.check.isChecked()
    assert dialog.output.text() == str(tmp_path / "merged-Q4_K_M.gguf")
    next(b for b in dialog.kinds.buttons() if b.objectName() == "q8_0").setChecked(True)
    assert dialog.output.text() == str(tmp_path / "merged-Q8_0.gguf")
    qtbot.mouseClick(dialog.export, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.status.text().startswith(("Done", "Cancelled")) or dialog.export.isEnabled(),
                    timeout=120_000)
    text = dialog.status.text()
    assert text.startswith("Done: " + str(tmp_path / "merged-Q8_0.gguf")), text
    assert "% perplexity" in text and "ollama create merged-q8_0" in text and "LM Studio" in text
    assert gguf.GGUFReader(tmp_path / "merged-Q8_0.gguf").fields["general.file_type"].contents() == 7
    modelfile = (tmp_path / "merged-Q8_0.Modelfile").read_text()
    assert "FROM ./merged-Q8_0.gguf" in modelfile
    assert dialog.progress.value() == 1000


def test_the_jobs_page_button_follows_finished_merges_and_applies(qtbot, state, tmp_path):
    from guiapp.ui.gguf_export_dialog import GgufExportButton

    button = GgufExportButton(state)
    qtbot.addWidget(button)
    folder = tmp_path / "merged"
    folder.mkdir()
    button.show_record(SimpleNamespace(kind="merge", status="done", output=str(folder)))
    assert button.isVisibleTo(button.parentWidget() or button) and button.isEnabled()
    button.show_record(SimpleNamespace(kind="merge", status="running", output=str(folder)))
    assert not button.isEnabled()
    button.show_record(SimpleNamespace(kind="download", status="done", output=str(folder)))
    assert not button.isEnabled() and button.isHidden()
    button.show_record(SimpleNamespace(kind="apply", status="done", output=str(Path(folder) / "gone")))
    assert not button.isEnabled()


def test_a_model_that_cannot_be_exported_is_explained_and_export_stays_off(qtbot, state, tmp_path):
    from guiapp.checkpoints.samples import write_bert
    from guiapp.ui.gguf_export_dialog import GgufExportDialog

    dialog = GgufExportDialog(state, write_bert(tmp_path / "encoder"))
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.status.text() != "Working out the sizes…", timeout=60_000)
    assert "BertModel" in dialog.status.text() and "cannot export" in dialog.status.text()
    assert not dialog.export.isEnabled()
