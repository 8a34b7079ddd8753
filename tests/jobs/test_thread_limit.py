"""`--threads N` on merge, extract-lora and apply-lora reaches the thread policy as the user's limit, survives a
retry, and a count below one is refused in plain words."""

from __future__ import annotations

import pytest

from guiapp.__main__ import main
from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.jobs.specs import job_from_spec, merge_job
from guiapp.lora import extract as lora_extract
from guiapp.system import threads

TINY = LlamaShape(hidden=16, intermediate=32, layers=1, heads=2, kv_heads=1, vocab=32)


@pytest.fixture
def limits(monkeypatch) -> list[int | None]:
    """The limits of the thread policies the jobs build."""
    seen: list[int | None] = []

    class RecordedPolicy(threads.ThreadPolicy):
        def __post_init__(self) -> None:
            seen.append(self.limit)
            super().__post_init__()

    monkeypatch.setattr(threads, "ThreadPolicy", RecordedPolicy)
    return seen


def test_threads_reach_the_policy_of_every_command(tmp_path, limits, monkeypatch, capsys):
    base = write_llama(tmp_path / "base", TINY, seed=0)
    tune = write_llama_finetune(tmp_path / "tune", base, seed=1, delta_rank=None)
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(f"merge_method: ties\nbase_model: {base}\nmodels:\n  - model: {tune}\n"
                      "    parameters: {weight: 1.0, density: 0.5}\ndtype: float32\n")
    assert main(["merge", str(recipe), str(tmp_path / "merged"), "--threads", "1"]) == 0
    assert limits == [1]

    decomposed_with = set()
    real_decompose = lora_extract.decompose

    def recorded(*args, **kwargs):
        import torch

        decomposed_with.add(torch.get_num_threads())
        return real_decompose(*args, **kwargs)

    monkeypatch.setattr(lora_extract, "decompose", recorded)
    assert main(["extract-lora", "--base", str(base), "--model", str(tune), "--out", str(tmp_path / "adapter"),
                     "--rank", "4", "--threads", "1"]) == 0
    assert limits == [1, 1] and decomposed_with == {1}
    assert main(["apply-lora", "--base", str(base), "--adapter", str(tmp_path / "adapter"),
                     "--out", str(tmp_path / "applied"), "--threads", "2"]) == 0
    assert limits == [1, 1, 2]
    assert main(["apply-lora", "--base", str(base), "--adapter", str(tmp_path / "adapter"),
                     "--out", str(tmp_path / "applied-default")]) == 0
    assert limits[-1] is None  # no limit: the cores other programs leave free


@pytest.mark.parametrize("text", ["0", "-2", "many"])
def test_a_thread_count_below_one_is_refused(text, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["merge", "recipe.yml", "out", "--threads", text])
    assert exit_.value.code == 2
    assert "1 or more" in capsys.readouterr().err


def test_a_retried_job_keeps_its_thread_limit(tmp_path):
    from guiapp.merging.recipe import recipe_from_dict

    recipe = recipe_from_dict({"merge_method": "linear", "models": [
        {"model": str(tmp_path / "a"), "parameters": {"weight": 0.5}},
        {"model": str(tmp_path / "b"), "parameters": {"weight": 0.5}}]})
    job = merge_job(recipe, tmp_path / "out", threads=3)
    assert job.spec["threads"] == 3
    assert job_from_spec("merge", job.spec).spec["threads"] == 3
