"""Default output names: short, unique in their folder, and an existing folder's first retry suggestion is a new
name, never replacing it."""

from __future__ import annotations

from pathlib import Path

from guiapp.checkpoints.output_guard import MARKER, free_destination
from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.jobs.naming import default_output, input_name
from guiapp.jobs.runner import JobStatus, run_job
from guiapp.jobs.specs import extract_job, retry
from guiapp.system.explain import explain

TINY = LlamaShape(hidden=32, intermediate=64, layers=1, heads=2, kv_heads=1, vocab=64)


def test_names_say_what_the_output_holds():
    assert input_name("org/tiny-chat") == input_name("/models/tiny-chat/") == input_name("org/tiny-chat@v2") \
        == "tiny-chat"
    assert input_name("C:\\models\\tiny chat") == "tiny-chat" and input_name("///") == "model"


def test_names_are_made_unique_in_their_folder(tmp_path: Path):
    assert default_output(tmp_path, "tiny-chat-lora-r32") == tmp_path / "tiny-chat-lora-r32"
    (tmp_path / "tiny-chat-lora-r32").mkdir()
    assert default_output(tmp_path, "tiny-chat-lora-r32") == tmp_path / "tiny-chat-lora-r32-2"
    (tmp_path / "tiny-chat-lora-r32-2").write_text("a file takes the name too")
    assert default_output(tmp_path, "tiny-chat-lora-r32") == tmp_path / "tiny-chat-lora-r32-3"
    assert free_destination(tmp_path / "tiny-chat-lora-r32-2") == tmp_path / "tiny-chat-lora-r32-3"
    (tmp_path / ".merged.mergesmith-lock").write_text("")  # a job is writing there right now
    assert default_output(tmp_path, "merged") == tmp_path / "merged-2"
    (tmp_path / "llama-3").mkdir()  # a number of its own, not one of ours
    assert free_destination(tmp_path / "llama-3") == tmp_path / "llama-3-2"


def test_an_existing_output_is_first_offered_a_new_name(tmp_path: Path):
    base = write_llama(tmp_path / "tiny-base", TINY, seed=0)
    tune = write_llama_finetune(tmp_path / "tiny-chat", base, seed=1)
    out = default_output(tmp_path, "tiny-chat-lora-r4")
    job = extract_job(str(base), str(tune), out, rank_value=4)
    assert run_job(job).status is JobStatus.DONE and (out / MARKER).is_file()
    first = (out / "adapter_model.safetensors").read_bytes()

    again = run_job(job)
    explanation = explain(again.error)
    assert again.status is JobStatus.FAILED
    assert explanation.remedy.changes == {"output": str(tmp_path / "tiny-chat-lora-r4-2")}
    assert explanation.replace_with.changes == {"overwrite": True}  # replacing: a separate, explicit choice
    assert "tiny-chat-lora-r4-2" in explanation.fix

    retried = run_job(retry(job.kind, job.spec, explanation.remedy.changes))
    assert retried.status is JobStatus.DONE
    assert (tmp_path / "tiny-chat-lora-r4-2" / "adapter_model.safetensors").is_file()
    assert (out / "adapter_model.safetensors").read_bytes() == first  # the earlier output is untouched
