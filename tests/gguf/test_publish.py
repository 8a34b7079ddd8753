"""Publishing an exported GGUF file with the real huggingface_hub client against the test Hub: the export records
how the file was made in its own metadata, and the card published with it says so and how to run it; the Jobs
page's Publish… button opens the dialog on an export's file."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from types import SimpleNamespace

import gguf
import numpy as np
import pytest
import yaml

from guiapp.__main__ import main
from guiapp.cli.process import EXIT_OK
from guiapp.errors import OutputError, UploadRefusedError
from guiapp.facts.gguf_types import KIND_WORDS
from guiapp.gguf.export import export_gguf
from guiapp.hub.upload import check_upload
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - the test Hub
from tests.support.hub_server import TEST_TOKEN, TEST_USER, enable_uploads

REPO = f"{TEST_USER}/merged-GGUF"


@pytest.fixture
def uploads(hub_env, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    return enable_uploads(hub_env.server, tmp_path / "hub-store")


def _merged(tiny_models, tmp_path) -> Path:
    """A tiny llama as a merge of two Hub models writes it: the weights and Mergesmith's recipe."""
    folder = shutil.copytree(tiny_models["llama"], tmp_path / "work" / "merged")
    (folder / "mergesmith_recipe.yml").write_text(
        "merge_method: linear\nmodels:\n  - model: org/base\n    parameters: {weight: 0.5}\n"
        "  - model: org/tune\n    parameters: {weight: 0.5}\n")
    return folder


def _front(card: str) -> dict:
    return yaml.safe_load(card.split("---\n")[1])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_export_records_what_the_file_was_made_from_in_its_metadata(tiny_models, tmp_path):
    path = export_gguf(str(_merged(tiny_models, tmp_path)), tmp_path / "merged-Q8_0.gguf", "q8_0").path
    fields = gguf.GGUFReader(path).fields
    assert fields["general.base_model.count"].contents() == 2
    assert fields["general.base_model.1.repo_url"].contents() == "https://huggingface.co/org/tune"
    assert fields["general.base_model.0.organization"].contents() == "org"
    assert fields["mergesmith.exported_with"].contents().startswith("Mergesmith ")
    assert "general.source.repo_url" not in fields  # exported from a folder here, not from the Hub
    texts = [field.contents() for field in fields.values() if field.types == [gguf.GGUFValueType.STRING]]
    assert not any(str(tmp_path) in text for text in texts)  # never a path on this computer


def test_a_gguf_file_is_published_with_a_card_that_says_how_it_was_made(uploads, hub_env, tiny_models, tmp_path,
                                                                      capsys):
    for repo in ("org/base", "org/tune"):
        hub_env.server.add_model(repo, tiny_models["llama"], card_data={"license": "apache-2.0"})
    path = export_gguf(str(_merged(tiny_models, tmp_path)), tmp_path / "merged-Q4_K_M.gguf", "q4_k_m").path
    (tmp_path / "merged-Q4_K_M.Modelfile").write_text("FROM ./merged-Q4_K_M.gguf\n")  # beside it, not sent

    assert main(["hub", "upload", str(path), REPO]) == EXIT_OK
    assert f"Published {REPO} (private)" in capsys.readouterr().out
    stored = uploads.store / REPO
    assert sorted(p.name for p in stored.iterdir()) == ["README.md", "merged-Q4_K_M.gguf"]
    assert _sha(stored / "merged-Q4_K_M.gguf") == _sha(path) and uploads.private[REPO] is True
    card = (stored / "README.md").read_text()
    front = _front(card)
    assert front == {"license": "apache-2.0", "base_model": ["org/base", "org/tune"], "library_name": "gguf",
                     "tags": ["gguf", "mergesmith"]}
    assert "**merged** (llama)" in card and "Made from: org/base, org/tune" in card
    assert f"Type: Q4_K_M — {KIND_WORDS['q4_k_m']}" in card and "Exported with Mergesmith 0." in card
    assert f"ollama run hf.co/{REPO}:Q4_K_M" in card and f"llama-cli -hf {REPO}:Q4_K_M" in card
    assert "LM Studio" in card and str(tmp_path) not in card


def test_a_hub_model_exported_names_it_as_the_source(uploads, hub_env, tiny_models, tmp_path):
    from guiapp.hub.upload import upload_folder
    from guiapp.jobs.publish import model_card

    hub_env.server.add_model("someone/tiny-qwen", tiny_models["qwen2"])
    folder = tmp_path / "ggufs"
    folder.mkdir()
    export_gguf("someone/tiny-qwen", folder / "tiny-qwen-Q8_0.gguf", "q8_0")
    export_gguf("someone/tiny-qwen", folder / "tiny-qwen-F16.gguf", "f16")
    plan = check_upload(folder, REPO)
    card = model_card(folder, plan.repo_id, "other")
    upload_folder(plan, card=card)
    stored = uploads.store / REPO
    assert sorted(p.name for p in stored.iterdir()) == ["README.md", "tiny-qwen-F16.gguf", "tiny-qwen-Q8_0.gguf"]
    assert _front(card)["base_model"] == ["someone/tiny-qwen"]
    assert "[someone/tiny-qwen](https://huggingface.co/someone/tiny-qwen), architecture qwen2" in card
    assert "| tiny-qwen-Q8_0.gguf | Q8_0 |" in card and "| tiny-qwen-F16.gguf | F16 |" in card


def _foreign_gguf(path: Path, name: str = "other") -> Path:
    """A GGUF file written by gguf-py itself, as another tool would: no record of how it was made."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(name)
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0))
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_file_another_tool_wrote_is_not_said_to_be_exported_by_mergesmith(tmp_path):
    from guiapp.jobs.publish import model_card

    card = model_card(_foreign_gguf(tmp_path / "other.gguf"), REPO, "mit")
    assert "Exported with Mergesmith" not in card and "does not say which tool wrote it" in card
    assert _front(card) == {"license": "mit", "library_name": "gguf", "tags": ["gguf"]}
    assert "Type: Q8_0" in card


def test_the_upload_checks_apply_to_a_gguf_file(uploads, tmp_path, monkeypatch):
    path = _foreign_gguf(tmp_path / "leaky.gguf", name=f"made with {TEST_TOKEN}")
    with pytest.raises(UploadRefusedError, match="leaky.gguf holds"):
        check_upload(path, REPO)
    with pytest.raises(OutputError, match="not a folder or a GGUF file"):
        check_upload((tmp_path / "notes.txt"), REPO)
    clean = _foreign_gguf(tmp_path / "clean.gguf")
    uploads.roles[TEST_TOKEN] = "read"
    with pytest.raises(UploadRefusedError, match="can only read"):
        check_upload(clean, REPO)
    assert uploads.created == []


def test_the_suggested_repo_name_drops_the_type():
    from guiapp.jobs.publish import suggested_repo_name

    assert suggested_repo_name(Path("/x/merged-Q4_K_M.gguf")) == "merged-GGUF"
    assert suggested_repo_name(Path("/x/model.gguf")) == "model-GGUF"
    assert suggested_repo_name(Path("/x/merged")) == "merged"


@pytest.fixture
def state(qtbot, tmp_path, monkeypatch):
    from guiapp.ui.job_bridge import JobBridge

    monkeypatch.setenv("MERGESMITH_CONFIG_DIR", str(tmp_path / "config"))
    bridge = JobBridge(keep_history=False)
    yield SimpleNamespace(jobs=bridge)
    bridge.shutdown(10)


def test_the_jobs_page_button_publishes_an_exports_file(qtbot, state, uploads, tiny_models, tmp_path):
    from PySide6.QtCore import Qt

    from guiapp.jobs.gguf_export import gguf_export_job
    from guiapp.ui.publish_dialog import PublishOutputButton

    button = PublishOutputButton(state)
    qtbot.addWidget(button)
    key = state.jobs.submit(gguf_export_job(str(_merged(tiny_models, tmp_path)), tmp_path / "merged-Q8_0.gguf",
                                            "q8_0", modelfile=True)).key
    button.show_record(state.jobs.record(key))
    assert not button.isHidden() and not button.isEnabled()  # an export is publishable once it has finished
    qtbot.waitUntil(lambda: not state.jobs.record(key).status.active, timeout=120_000)
    record = state.jobs.record(key)
    assert record.status == "done", record.log
    button.show_record(record)
    assert button.isEnabled() and button.folder == tmp_path / "merged-Q8_0.gguf"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    dialog = button.dialog
    qtbot.addWidget(dialog)
    assert dialog.folder == tmp_path / "merged-Q8_0.gguf" and dialog.private.isChecked()
    qtbot.waitUntil(lambda: dialog.check_status.text().startswith("Ready"), timeout=30_000)
    assert dialog.repo.text() == REPO and "1 file" in dialog.check_status.text()
    assert "library_name: gguf" in dialog.card.toPlainText()
    qtbot.mouseClick(dialog.publish, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.progress_text.text().startswith("Published"), timeout=60_000)
    stored = uploads.store / REPO
    assert sorted(p.name for p in stored.iterdir()) == ["README.md", "merged-Q8_0.gguf"]
    assert "Exported with Mergesmith" in (stored / "README.md").read_text()
    (tmp_path / "merged-Q8_0.gguf").unlink()
    button.show_record(record)  # the file is gone: nothing to publish
    assert not button.isEnabled()


def test_a_damaged_gguf_file_is_explained_and_publish_stays_off(qtbot, state, uploads, tmp_path):
    from guiapp.ui.publish_dialog import PublishDialog

    whole = _foreign_gguf(tmp_path / "whole.gguf").read_bytes()
    damaged = tmp_path / "damaged-Q8_0.gguf"
    damaged.write_bytes(whole[:60])  # cut inside the metadata
    dialog = PublishDialog(state, damaged)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: "could not be read as a GGUF file" in dialog.check_status.text(), timeout=30_000)
    assert not dialog.publish.isEnabled() and dialog.card.toPlainText() == ""
    dialog.repo.setText(f"{TEST_USER}/another-name")  # checked again: still refused
    qtbot.waitUntil(lambda: not dialog.check_status.text().startswith("Checking"), timeout=30_000)
    assert "could not be read as a GGUF file" in dialog.check_status.text()
    assert not dialog.publish.isEnabled() and uploads.created == []


def test_a_base_with_its_adapter_is_recorded_as_made_from_both(tmp_path):
    from guiapp.gguf.provenance import MadeFrom, made_from
    from guiapp.hub.references import ModelRef

    assert made_from(ModelRef.parse("org/base+org/adapter"), None) == MadeFrom(None, ["org/base", "org/adapter"])
    assert made_from(ModelRef.parse(f"org/base+{tmp_path}"), None) == MadeFrom(None, ["org/base"])
    assert made_from(ModelRef.parse("org/base@v2"), None) == MadeFrom("org/base", [])
