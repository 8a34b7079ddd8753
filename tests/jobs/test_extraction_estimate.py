"""The extraction's disk estimate counts what the adapter really holds: LoRA factors and the tensors saved whole
(embeddings, output head, norms)."""

from __future__ import annotations

import pytest

from guiapp.engine.lora_extract import ExtractionSettings, extract_lora
from guiapp.engine.lowrank import RankRule
from guiapp.engine.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.engine.sources import read_headers
from guiapp.hub.references import ModelRef
from guiapp.jobs.estimates import estimate_extraction

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
