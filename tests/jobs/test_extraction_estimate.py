"""The extraction's disk estimate counts what the adapter really holds: LoRA factors and the tensors saved whole
(embeddings, output head, norms)."""

from __future__ import annotations

import pytest

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.checkpoints.sources import read_headers
from guiapp.hub.references import ModelRef
from guiapp.jobs.estimates import estimate_extraction
from guiapp.lora.extract import ExtractionSettings, extract_lora
from guiapp.lora.lowrank import RankRule

# A vocabulary large next to the layers, as in real models, where the saved embeddings dominate the adapter.
SHAPE = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=2048)


@pytest.mark.parametrize("embeddings", ["save", "lora", "skip"])
def test_the_disk_estimate_matches_the_adapter_written(tmp_path, embeddings):
    base = write_llama(tmp_path / "base", SHAPE, seed=0)
    tune = write_llama_finetune(tmp_path / "tune", base, seed=1, delta_rank=None)
    out = tmp_path / "adapter"
    estimate = estimate_extraction(read_headers(ModelRef.parse(str(base))), read_headers(ModelRef.parse(str(tune))),
                                   "cpu", out, rank=8, embeddings=embeddings)
    extract_lora(ExtractionSettings(base=str(base), model=str(tune), out=out, rule=RankRule("fixed", 8, None),
                                    embeddings=embeddings))
    written = sum(path.stat().st_size for path in out.glob("*.safetensors"))
    # An upper bound (a module that did not change is not saved), close when everything changed as here.
    assert written <= estimate.output_bytes <= 1.2 * written, (estimate.output_bytes, written)


# A large vocabulary next to few layers: the embeddings and the head, read first and last, are most of the bytes.
WIDE_VOCABULARY = LlamaShape(hidden=256, intermediate=688, layers=2, heads=4, kv_heads=2, vocab=16000)


def test_the_extractions_bar_follows_the_decompositions_not_the_bytes(tmp_path):
    from guiapp.progress import Progress

    base = write_llama(tmp_path / "base", WIDE_VOCABULARY, seed=0)
    tune = write_llama_finetune(tmp_path / "tune", base, seed=1)
    events = []
    extract_lora(ExtractionSettings(base=str(base), model=str(tune), out=tmp_path / "adapter",
                                    rule=RankRule("fixed", 64, None)), Progress(on_event=events.append))
    steps = [e for e in events if e.stage == "Extracting" and e.item]
    after_embeddings = next(e for e in steps if "embed_tokens" in e.item)
    # The embeddings are saved whole: read and compared, no decomposition, so little of the job's time.
    bytes_fraction = after_embeddings.bytes_done / after_embeddings.bytes_total
    assert bytes_fraction > 0.4
    assert after_embeddings.fraction < 0.6 * bytes_fraction, after_embeddings
    assert after_embeddings.eta is not None and steps[-1].fraction == 1.0


def test_the_extraction_estimate_grows_with_the_rank_and_the_exact_solver(tmp_path, monkeypatch):
    from guiapp.jobs import durations
    from guiapp.system.probe import ProbeResult, Speed

    monkeypatch.setattr(durations, "_thread_share", lambda: 0.5)  # the estimates compared at one load

    probe = ProbeResult(fingerprint={}, speeds=[Speed("cpu", "float32", "matmul", 0.001, 60.0, None)])
    base = write_llama(tmp_path / "base", SHAPE, seed=0)
    headers = read_headers(ModelRef.parse(str(base)))

    def seconds(**options) -> float:
        return estimate_extraction(headers, headers, "cpu", tmp_path / "adapter", probe, **options).time.seconds

    assert seconds(rank=16) < seconds(rank=32) < seconds(rank=128)
    assert seconds(rule=RankRule("energy", 0.9, None)) > seconds(rank=32)
    assert seconds(rank=16, solver="exact") > seconds(rank=32)
