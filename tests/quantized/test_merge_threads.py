"""A merge of quantized inputs dequantizes a piece's inputs at once on the cores the thread policy gives dense work
(guiapp/merging/merge.py): each on its own thread with one torch thread, the same bytes written whoever read them."""

from __future__ import annotations

import threading

import pytest
import torch

from guiapp.checkpoints.quantized.layout import QuantizedLayout
from guiapp.checkpoints.samples import LlamaShape, write_llama
from guiapp.merging.merge import BLOCK_ELEMENTS, MergeSettings, run_merge
from guiapp.system.threads import ThreadPolicy
from tests.engine.helpers import recipe
from tests.quantized.helpers import bnb_4bit, bnb_4bit_settings, quantized_copy

pytest.importorskip("bitsandbytes")


@pytest.fixture(scope="module")
def quantized_pair(tmp_path_factory):
    """Two 4-bit models whose MLP weights are larger than a block (read in blocks of rows), the others whole."""
    folder = tmp_path_factory.mktemp("pair")
    shape = LlamaShape(layers=1, intermediate=BLOCK_ELEMENTS // 64 + 64)
    return tuple(quantized_copy(write_llama(folder / f"plain-{seed}", shape, seed=seed), folder / f"bnb4-{seed}",
                                bnb_4bit(), bnb_4bit_settings()) for seed in (1, 2))


def _reading_threads(pair, out, policy: ThreadPolicy, monkeypatch) -> tuple[dict[str, set], bytes]:
    """({"rows": the (thread, torch threads) pairs that dequantized blocks of rows, "whole": those that dequantized
    whole weights}, the merged output's bytes)."""
    seen: dict[str, set] = {"rows": set(), "whole": set()}
    read, read_rows = QuantizedLayout.read, QuantizedLayout.read_rows

    def recording_read(self, *args):
        seen["whole"].add((threading.get_ident(), torch.get_num_threads()))
        return read(self, *args)

    def recording_read_rows(self, *args):
        seen["rows"].add((threading.get_ident(), torch.get_num_threads()))
        return read_rows(self, *args)

    monkeypatch.setattr(QuantizedLayout, "read", recording_read)
    monkeypatch.setattr(QuantizedLayout, "read_rows", recording_read_rows)
    one, two = pair
    text = (f"merge_method: linear\ndtype: bfloat16\nmodels:\n  - model: {one}\n    parameters: {{weight: 0.3}}\n"
            f"  - model: {two}\n    parameters: {{weight: 0.7}}\n")
    run_merge(recipe(text), MergeSettings(out, threads=policy))
    monkeypatch.undo()
    return seen, b"".join(p.read_bytes() for p in sorted(out.glob("*.safetensors")))


def test_quantized_inputs_are_dequantized_at_once_on_the_free_cores_one_torch_thread_each(
        quantized_pair, tmp_path, monkeypatch):
    together, merged = _reading_threads(quantized_pair, tmp_path / "two",
                                        ThreadPolicy(busy_elsewhere=lambda: 0.0, cores=2), monkeypatch)
    for kind in ("rows", "whole"):
        assert len({ident for ident, _ in together[kind]}) == 2, kind
        assert {threads for _, threads in together[kind]} == {1}, kind
    for name, policy in (("limit", ThreadPolicy(limit=1, busy_elsewhere=lambda: 0.0, cores=2)),
                         ("busy", ThreadPolicy(busy_elsewhere=lambda: 1.0, cores=2))):
        alone, merged_alone = _reading_threads(quantized_pair, tmp_path / name, policy, monkeypatch)
        assert len({ident for pairs in alone.values() for ident, _ in pairs}) == 1, name
        assert merged_alone == merged, name  # the same bytes, whoever dequantized
