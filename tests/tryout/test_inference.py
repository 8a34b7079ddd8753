"""Trying models: generation as transformers does it, perplexity as computed independently, one dtype for model,
adapter and inputs (the two seed failures), encoders compared by similarity, cancel, and clear refusals."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest
import torch

from guiapp.errors import JobCancelled, SettingsError, UnsupportedModelError
from guiapp.inference.running import (
    CAUSAL,
    ENCODER,
    GenerationSettings,
    generate,
    load_model,
    perplexity,
    read_text_file,
    resolve_sources,
    sentence_pairs,
    similarities,
)
from guiapp.jobs.runner import JobListeners, JobRunner, JobStatus
from guiapp.jobs.tryout import perplexity_job, plan_try, try_job
from guiapp.progress import CancelToken, Progress
from tests.support.lazy_import import LazyModule
from tests.tryout.models import CHAT_TEMPLATE, SENTENCES

transformers = pytest.importorskip("transformers")
peft = LazyModule("peft")

PROMPT = "the cat sat on the"
TEXT = " ".join(SENTENCES)


def direct_generate(folder: Path, dtype: torch.dtype, settings: GenerationSettings, adapter: Path | None = None):
    """The same generation written against transformers directly, as a user's notebook would."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    if adapter is not None:
        model = peft.PeftModel.from_pretrained(model, adapter).to(dtype)
    model.eval()
    text = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False,
                                         add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    if settings.sample:
        torch.manual_seed(settings.seed)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), pad_token_id=tokenizer.pad_token_id,
                         **settings.generate_kwargs())
    return out[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("settings", [GenerationSettings(max_new_tokens=12),
                                      GenerationSettings(max_new_tokens=12, sample=True, seed=7)],
                         ids=["greedy", "sampled"])
def test_generation_gives_the_tokens_transformers_gives(causal_fp32, settings):
    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    pieces: list[str] = []
    result = generate(loaded, PROMPT, settings, on_text=pieces.append)
    assert result.token_ids == direct_generate(causal_fp32, torch.float32, settings)
    assert len(result.token_ids) == 12
    assert "".join(pieces).strip() == result.text.strip() and len(pieces) > 1  # streamed in pieces


def test_a_bfloat16_model_gives_the_logits_transformers_gives(causal_bf16):
    # Its rotary frequencies stay float32, as transformers keeps them: rounded to bfloat16 with the weights, they
    # moved every position's angle and the logits differed from the second layer on.
    loaded = load_model(resolve_sources([str(causal_bf16)])[0], torch.bfloat16, "cpu")
    direct = transformers.AutoModelForCausalLM.from_pretrained(causal_bf16, dtype=torch.bfloat16).eval()
    ids = loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"][:, :64]
    with torch.no_grad():
        assert torch.equal(loaded.model(ids).logits, direct(ids).logits)


def test_chat_template_wraps_the_prompt(causal_fp32):
    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    assert loaded.tokenizer.chat_template == CHAT_TEMPLATE
    from guiapp.inference.running import prompt_ids

    words = loaded.tokenizer.convert_ids_to_tokens(prompt_ids(loaded, PROMPT)[0].tolist())
    assert words[0] == "<user>" and words[-1] == "<bot>"


def test_perplexity_equals_an_independent_computation(causal_fp32):
    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    result = perplexity(loaded, TEXT)
    model = transformers.AutoModelForCausalLM.from_pretrained(causal_fp32, dtype=torch.float32)
    ids = transformers.AutoTokenizer.from_pretrained(causal_fp32)(TEXT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss  # transformers' own mean cross-entropy of next tokens
    assert result.windows == 1 and result.tokens == ids.shape[1] - 1
    assert result.perplexity == pytest.approx(math.exp(loss.item()), rel=1e-5)


def test_perplexity_in_windows_predicts_every_token_once(causal_fp32):
    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    whole = perplexity(loaded, TEXT)
    windowed = perplexity(loaded, TEXT, window=8)
    assert windowed.tokens == whole.tokens and windowed.windows == math.ceil(whole.tokens / 7)
    assert math.isfinite(windowed.perplexity) and windowed.perplexity != pytest.approx(whole.perplexity)


def test_float16_model_on_the_cpu_produces_text(causal_fp16, probe_in_cache):
    plan = plan_try([str(causal_fp16)], "cpu", None, probe_in_cache)
    assert plan.models[0].storage_dtype == "float16"
    job = try_job([str(causal_fp16)], PROMPT, max_new_tokens=8, probe_result=probe_in_cache)
    result = JobRunnerOnce().run(job)
    assert result.status is JobStatus.DONE, result.traceback
    assert result.summary["generations"][0]["text"].strip()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_bfloat16_base_with_lora_adapter_generates_on_the_cpu(causal_bf16, bf16_adapter, dtype):
    loaded = load_model(resolve_sources([f"{causal_bf16}+{bf16_adapter}"])[0], dtype, "cpu")
    assert isinstance(loaded.model, peft.PeftModel)
    assert {p.dtype for p in loaded.model.parameters()} == {dtype}
    result = generate(loaded, PROMPT, GenerationSettings(max_new_tokens=8))
    assert result.text.strip()
    plain = generate(load_model(resolve_sources([str(causal_bf16)])[0], dtype, "cpu"), PROMPT,
                     GenerationSettings(max_new_tokens=8))
    assert result.token_ids != plain.token_ids or dtype == torch.bfloat16  # the adapter does something


def test_adapter_in_float32_matches_peft_directly(causal_bf16, bf16_adapter):
    settings = GenerationSettings(max_new_tokens=10)
    loaded = load_model(resolve_sources([f"{causal_bf16}+{bf16_adapter}"])[0], torch.float32, "cpu")
    assert generate(loaded, PROMPT, settings).token_ids == direct_generate(causal_bf16, torch.float32, settings,
                                                                           bf16_adapter)


def test_encoder_is_compared_by_similarity(encoder):
    loaded = load_model(resolve_sources([str(encoder)])[0], torch.float32, "cpu")
    assert loaded.kind == ENCODER
    same, different = similarities(loaded, [(SENTENCES[0], SENTENCES[0]), (SENTENCES[0], SENTENCES[3])])
    assert same == pytest.approx(1.0, abs=1e-5) and -1 <= different < same
    with pytest.raises(UnsupportedModelError, match="encoder"):
        generate(loaded, PROMPT, GenerationSettings())


def test_perplexity_job_gives_encoders_similarities(causal_fp32, encoder, probe_in_cache):
    text = f"{SENTENCES[0]}\t{SENTENCES[1]}\n{SENTENCES[2]}\t{SENTENCES[2]}"
    result = JobRunnerOnce().run(perplexity_job([str(causal_fp32), str(encoder)], text, probe_result=probe_in_cache))
    assert result.status is JobStatus.DONE, result.traceback
    causal, embedded = result.summary["results"]
    assert causal["kind"] == CAUSAL and causal["perplexity"] > 1
    assert embedded["kind"] == ENCODER and embedded["similarities"][1] == pytest.approx(1.0, abs=1e-5)


def test_unknown_architecture_is_explained(tmp_path, causal_fp32):
    folder = tmp_path / "strange"
    folder.mkdir()
    for file in causal_fp32.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="frobnicator", architectures=["FrobnicatorForCausalLM"])
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="FrobnicatorForCausalLM.*transformers does not know"):
        load_model(resolve_sources([str(folder)])[0], torch.float32, "cpu")


def test_model_needing_its_own_code_is_refused_without_running_it(tmp_path, causal_fp32):
    folder = tmp_path / "remote"
    folder.mkdir()
    for file in causal_fp32.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="custom_thing", architectures=["CustomForCausalLM"],
                  auto_map={"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_custom.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\n")
    with pytest.raises(UnsupportedModelError, match="never runs code"):
        load_model(resolve_sources([str(folder)])[0], torch.float32, "cpu")
    assert not (tmp_path / "ran").exists()


def test_cancel_stops_generation(causal_fp32, probe_in_cache):
    job = try_job([str(causal_fp32)], PROMPT, max_new_tokens=100_000, probe_result=probe_in_cache)
    result = JobRunnerOnce().run_and_cancel(job, after_events=5)
    assert result.status is JobStatus.CANCELLED


def test_cancel_stops_perplexity(causal_fp32, probe_in_cache):
    job = perplexity_job([str(causal_fp32)], TEXT * 400, window=4, probe_result=probe_in_cache)
    result = JobRunnerOnce().run_and_cancel(job, after_events=5)
    assert result.status is JobStatus.CANCELLED


def test_cancelled_progress_stops_generation_at_the_next_token(causal_fp32):
    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    token = CancelToken()
    pieces: list[str] = []

    def on_text(text: str) -> None:
        pieces.append(text)
        token.cancel()

    with pytest.raises(JobCancelled):
        generate(loaded, PROMPT, GenerationSettings(max_new_tokens=100_000), Progress(cancel=token), on_text)
    assert len(pieces) == 1


def test_models_are_loaded_one_at_a_time_when_they_do_not_fit(causal_fp32, causal_fp16, probe_in_cache, monkeypatch):
    from guiapp.system import resources

    together = plan_try([str(causal_fp32), str(causal_fp16)], "cpu", None, probe_in_cache)
    assert together.together
    # Room for either model alone (about 330 KB of weights each), not for both with their working memory.
    monkeypatch.setattr(resources, "memory", lambda: resources.Memory(total=10**9, available=500_000))
    alone = plan_try([str(causal_fp32), str(causal_fp16)], "cpu", None, probe_in_cache)
    assert not alone.together and "one at a time" in alone.reason


def test_five_models_are_refused_as_a_setting(causal_fp32, probe_in_cache):
    with pytest.raises(SettingsError, match="one to 4 models") as caught:
        plan_try([str(causal_fp32)] * 5, "cpu", None, probe_in_cache)
    assert caught.value.key == ("models",)


def test_text_files(tmp_path):
    (tmp_path / "a.txt").write_text("plain text")
    (tmp_path / "b.jsonl").write_text('{"text": "one"}\n\n{"text": "two"}\n')
    (tmp_path / "c.jsonl").write_text('{"body": "one"}\n')
    assert read_text_file(tmp_path / "a.txt") == "plain text"
    assert read_text_file(tmp_path / "b.jsonl") == "one\n\ntwo"
    with pytest.raises(SettingsError, match="Line 1 .* no \"text\"") as caught:
        read_text_file(tmp_path / "c.jsonl")
    assert caught.value.key == ("text",)
    assert sentence_pairs("a\tb\nc\td") == [("a", "b"), ("c", "d")]
    assert sentence_pairs("a\nb\nc") == [("a", "b")]


class JobRunnerOnce:
    """Runs one job on the real JobRunner and waits (generously) for it to end."""

    LIMIT_SECONDS = 120

    def run(self, job):
        return self.run_and_cancel(job, after_events=None)

    def run_and_cancel(self, job, after_events: int | None):
        runner = JobRunner()
        done = threading.Event()
        results = []
        events = []

        def on_event(job_, event):
            if event.stage.startswith(("Generating", "Perplexity")):
                events.append(event)
                if after_events is not None and len(events) == after_events:
                    runner.cancel(job.id)

        def on_done(result):
            results.append(result)
            done.set()

        runner.submit(job, JobListeners(on_event=on_event, on_done=on_done))
        try:
            assert done.wait(self.LIMIT_SECONDS), "the job did not end"
        finally:
            runner.shutdown(timeout=self.LIMIT_SECONDS)
        return results[0]


def test_a_try_job_is_rebuilt_from_its_spec_for_retry(causal_fp32, probe_in_cache):
    from guiapp.jobs.specs import job_from_spec, retry

    job = try_job([str(causal_fp32)], PROMPT, max_new_tokens=4, device="cuda:7", probe_result=probe_in_cache)
    again = retry("try", job.spec, {"device": "cpu"})
    assert again.kind == "try" and again.spec == {**job.spec, "device": "cpu"}
    result = JobRunnerOnce().run(again)
    assert result.status is JobStatus.DONE, result.traceback
    assert job_from_spec("perplexity", perplexity_job([str(causal_fp32)], TEXT).spec).kind == "perplexity"


def test_kept_models_are_reused_until_their_folder_is_replaced(causal_fp32, probe_in_cache, tmp_path):
    import shutil

    from guiapp.jobs.tryout import ModelShelf

    folder = tmp_path / "output"
    shutil.copytree(causal_fp32, folder)
    shelf = ModelShelf()

    def loads() -> int:
        result = JobRunnerOnce().run(try_job([str(folder)], PROMPT, max_new_tokens=2, shelf=shelf,
                                             probe_result=probe_in_cache))
        assert result.status is JobStatus.DONE, result.traceback
        return sum(line.startswith("Loaded ") for line in result.log)

    assert loads() == 1
    assert loads() == 0  # kept loaded
    replacement = tmp_path / "output.new"
    shutil.copytree(causal_fp32, replacement)
    shutil.rmtree(folder)
    replacement.rename(folder)  # as a job writing the same output again does
    assert loads() == 1
    assert len(shelf.loaded) == 1


def test_a_hub_model_is_downloaded_and_tried(causal_fp32, bf16_adapter, causal_bf16, probe_in_cache, hub_env):
    hub_env.server.add_model("org/tiny-chat", causal_fp32)
    hub_env.server.add_model("org/tiny-adapter", bf16_adapter, library_name="peft")
    hub_env.server.add_model("org/tiny-bf16", causal_bf16)
    job = try_job(["org/tiny-chat", str(causal_fp32), "org/tiny-bf16+org/tiny-adapter"], PROMPT,
                  max_new_tokens=6, probe_result=probe_in_cache)
    result = JobRunnerOnce().run(job)
    assert result.status is JobStatus.DONE, result.traceback
    from_hub, local, adapted = result.summary["generations"]
    assert from_hub["tokens"] == local["tokens"] and adapted["text"].strip()


@pytest.mark.parametrize(("field", "value"), [("temperature", 0.0), ("temperature", float("nan")), ("top_p", 0.0),
                                              ("top_p", 1.5)])
def test_sampling_settings_out_of_range_are_refused_by_name(field, value):
    from guiapp.errors import SettingsError

    with pytest.raises(SettingsError) as caught:
        GenerationSettings(sample=True, **{field: value})
    assert caught.value.key == (field,)


def test_job_titles_count_models_in_words():
    assert try_job(["a"], "hi").title == "Try 1 model"
    assert perplexity_job(["a", "b"], "text").title == "Perplexity of 2 models"


def test_generation_counts_each_token_by_its_cost_which_grows_with_the_context(causal_fp32):
    """Each new token attends to every token before it: the stage counts tokens by their cost, so its bar and
    time left do not take the last tokens of a long text as cheap as the first."""
    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    events = []
    generate(loaded, PROMPT, GenerationSettings(max_new_tokens=12), Progress(on_event=events.append))
    steps = [e for e in events if e.stage.startswith("Generating") and e.item == "token"]
    works = [later.work_done - earlier.work_done for earlier, later in zip(steps, steps[1:], strict=False)]
    assert steps[0].work_total > 0 and len(works) == 11
    assert all(later > earlier for earlier, later in zip(works, works[1:], strict=False)), works
    assert steps[-1].fraction == 1.0


def test_perplexity_moves_its_bar_window_by_window(causal_fp32):
    """A text read as one piece is scored in several windows: the bar moves after each (it jumped from 0 to
    100 % as the last window began, so its time left said 0 s while windows were still being scored)."""
    loaded = load_model(resolve_sources([str(causal_fp32)])[0], torch.float32, "cpu")
    events = []
    result = perplexity(loaded, TEXT, window=8, progress=Progress(on_event=events.append))
    windows = [e for e in events if e.item.startswith("window")]
    assert len(windows) == result.windows > 4
    fractions = [e.fraction for e in windows]
    assert fractions == sorted(fractions) and len(set(fractions)) == len(fractions) and fractions[-1] == 1.0
    assert fractions[0] < 0.5
