"""The rank preview's spectra: what a LoRA of each rank keeps of a fine-tune's update."""

from __future__ import annotations

import pytest
import torch

from guiapp.checkpoints.reading import open_checkpoint
from guiapp.checkpoints.tensor_roles import split_layer_name
from guiapp.errors import IncompatibleModelsError, JobCancelled, OfflineError
from guiapp.lora.spectrum import preview_spectra, sample_modules, update_spectrum
from tests.lora.helpers import finetune
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - fixtures


def _rank_r(rows: int, cols: int, rank: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, rank, generator=generator) @ torch.randn(rank, cols, generator=generator)


def test_a_rank_r_update_keeps_all_its_energy_at_rank_r_and_not_before():
    spectrum = update_spectrum("layers.0.mlp", _rank_r(96, 64, 5), max_rank=32)
    assert spectrum.shape == (96, 64)
    assert spectrum.retained_at(5) == pytest.approx(1.0, abs=1e-5)
    assert spectrum.retained_at(4) < 0.99
    assert spectrum.rank_for(0.9999) == 5
    assert all(a <= b + 1e-12 for a, b in zip(spectrum.retained, spectrum.retained[1:]))  # never decreases
    assert spectrum.singular_values[5] < 1e-3 * spectrum.singular_values[0]


def test_half_precision_updates_are_decomposed_in_float32():
    spectrum = update_spectrum("m", _rank_r(48, 40, 3).to(torch.bfloat16), max_rank=16)
    assert spectrum.rank_for(0.999) == 3


def test_a_zero_update_keeps_everything():
    spectrum = update_spectrum("m", torch.zeros(8, 8))
    assert spectrum.retained_at(1) == 1.0 and spectrum.rank_for(1.0) == 1


def test_the_sample_spreads_over_the_layers_and_leaves_out_embeddings(llama_base):
    with open_checkpoint(llama_base) as checkpoint:
        tensors = checkpoint.tensors
    sample = sample_modules(tensors, 8)
    layers = sorted({split_layer_name(f"{m}.weight").index for m in sample})
    all_layers = sorted({p.index for n in tensors if (p := split_layer_name(n)) is not None})
    assert len(sample) == 8 and len(set(sample)) == 8
    assert layers[0] == all_layers[0] and layers[-1] == all_layers[-1]
    assert not any("embed" in m or "lm_head" in m for m in sample)
    assert len({m.rpartition(".")[2] for m in sample}) > 2  # attention and MLP kinds both appear


def test_the_preview_of_a_planted_rank_4_fine_tune_reaches_all_its_energy_at_rank_4(llama_base, tmp_path):
    tuned = finetune(llama_base, tmp_path / "tuned", rank_of=lambda module: 4, shift_1d=0.0)
    spectra = preview_spectra(str(llama_base), str(tuned), count=4, max_rank=16)
    assert len(spectra) == 4
    for spectrum in spectra:
        assert spectrum.rank_for(0.9999) == 4, spectrum.module
        assert spectrum.retained_at(3) < 0.9999


def test_the_preview_can_be_stopped_and_refuses_an_unrelated_base(llama_base, bert_pair):
    with pytest.raises(JobCancelled):
        preview_spectra(str(llama_base), str(llama_base), cancelled=lambda: True)
    with pytest.raises(IncompatibleModelsError):
        preview_spectra(str(bert_pair[0]), str(llama_base))


def test_the_extraction_summary_lists_each_lora_modules_retained_energy(llama_base, llama_planted, tmp_path):
    from tests.lora.helpers import adapter_report, extract

    summary = extract(llama_base, llama_planted, tmp_path / "adapter")
    report = adapter_report(tmp_path / "adapter")
    lora = {m["module"]: m for m in report["modules"] if m["kind"] == "lora"}
    assert {m["module"] for m in summary["module_energies"]} == set(lora)
    for entry in summary["module_energies"]:
        assert entry["retained_energy"] == lora[entry["module"]]["retained_energy"]
        assert entry["rank"] == lora[entry["module"]]["rank"]


def test_a_hub_model_not_downloaded_is_not_fetched_for_a_preview(hub_env, hub_server, llama_base, llama_planted):
    hub_server.add_model("org/tuned", llama_planted)
    with pytest.raises(OfflineError, match="org/tuned is not downloaded yet") as caught:
        preview_spectra(str(llama_base), "org/tuned")
    assert "Download it" in caught.value.hint
    assert not list(hub_env.cache_dir.glob("models--org--tuned/**/*.safetensors"))  # nothing was downloaded


@pytest.mark.parametrize("noise", [0.1, 0.3])
def test_the_sketched_curve_agrees_with_the_exact_one_on_a_planted_low_rank_update_with_noise(noise):
    """A rank-24 change (decaying strengths) plus full-rank noise holding `noise` of the energy, as a fine-tune's
    update looks: the sketch's curve is within 0.03 of the exact one at every rank up to the preview's, and never
    above it (a sketch only finds less)."""
    from guiapp.lora.spectrum import PREVIEW_MAX_RANK

    generator = torch.Generator().manual_seed(3)
    rows, cols = 1024, 512
    signal = torch.randn(rows, 24, generator=generator) @ torch.diag(torch.logspace(0, -1, 24)) \
        @ torch.randn(24, cols, generator=generator)
    random = torch.randn(rows, cols, generator=generator)
    delta = signal + random * (noise / (1 - noise) * signal.square().sum() / random.square().sum()).sqrt()
    exact = torch.linalg.svdvals(delta.double()).square()
    exact_curve = torch.cumsum(exact, 0)[:PREVIEW_MAX_RANK] / exact.sum()
    sketched = torch.tensor(update_spectrum("m", delta).retained, dtype=torch.float64)
    assert len(sketched) == PREVIEW_MAX_RANK
    assert float((exact_curve - sketched).abs().max()) < 0.03
    assert bool((sketched <= exact_curve + 1e-4).all())


def test_the_preview_says_how_far_it_is_and_stop_ends_it_at_the_next_module(llama_base, tmp_path):
    tuned = finetune(llama_base, tmp_path / "tuned", rank_of=lambda module: 4, shift_1d=0.0)
    seen: list[tuple[int, int]] = []
    spectra = preview_spectra(str(llama_base), str(tuned), count=4, max_rank=16,
                              on_module=lambda done, total: seen.append((done, total)))
    assert len(spectra) == 4 and seen == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    seen.clear()
    with pytest.raises(JobCancelled):
        preview_spectra(str(llama_base), str(tuned), count=4, max_rank=16, cancelled=lambda: len(seen) >= 2,
                        on_module=lambda done, total: seen.append((done, total)))
    assert seen == [(0, 4), (1, 4)]  # stopped as asked, before a third module was read


def test_a_model_with_few_matrices_gets_fewer_samples():
    from guiapp.lora.spectrum import preview_sample_size

    # A sketch costs about one and a half rank-16 decompositions: eight of a 4-layer model's 28 matrices took half
    # the extraction's time, three take a sixth.
    assert [preview_sample_size(n) for n in (2, 28, 42, 70, 224)] == [2, 3, 5, 8, 8]


def test_a_preview_of_folders_on_this_computer_does_not_load_the_hub_client(llama_base, llama_planted):
    """Loading huggingface_hub was a third of a small pair's first preview, for folders it never looks at."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = ("import sys\nfrom guiapp.lora.spectrum import preview_spectra\n"
            f"preview_spectra({str(llama_base)!r}, {str(llama_planted)!r})\n"
            "print(sorted(name for name in sys.modules if name.startswith(('huggingface_hub', 'guiapp.hub.resolve'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_small_preview_runs_on_one_thread_without_waiting_for_a_load_reading(llama_base, llama_planted, monkeypatch):
    """A few tens of milliseconds of sketching gain nothing from a second thread, and the reading of the machine's
    load that decides on one slept 16 ms of a small pair's 50 ms preview; a larger sample still asks."""
    from guiapp.lora import spectrum  # noqa: PLC0415
    from guiapp.system import threads  # noqa: PLC0415

    slept, chosen = [], []
    monkeypatch.setattr(threads.time, "sleep", slept.append)
    monkeypatch.setattr(spectrum, "use_cpu_threads", chosen.append)
    preview_spectra(str(llama_base), str(llama_planted))
    assert chosen == [1] and slept == []
    asked = []
    monkeypatch.setattr(spectrum, "ONE_THREAD_SKETCH_WORK", 0)
    monkeypatch.setattr(spectrum.ThreadPolicy, "threads_for", lambda policy, kind: asked.append(kind) or 2)
    preview_spectra(str(llama_base), str(llama_planted))
    assert asked and chosen == [1, 2]
