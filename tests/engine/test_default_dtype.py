"""A job's results do not depend on torch's default dtype, which another thread may change while the job runs.

transformers sets the default dtype to the model's (bfloat16, say) while it builds a model, for the whole process:
a Try, a perplexity or an export's check loading a model in one thread changed what `torch.empty(n)` made in a
merge or an export running in another (a GGUF export failed with "Found dtype BFloat16 but expected Float"; an
adapted merge input lost its float32). Each case runs in a new thread, as a job does.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from guiapp.gguf.quantize import encode
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.methods import METHODS
from tests.engine.helpers import float32_trio_in, recipe, recipe_for_method
from tests.support.default_dtype import default_dtype, in_new_thread


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_K", "Q5_K", "Q6_K"])
def test_gguf_blocks_are_the_same_whatever_the_default_dtype(kind):
    qtype = gguf.GGMLQuantizationType[kind]
    rows = torch.randn(16, 512, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    expected = in_new_thread(lambda: encode(rows, qtype, threads=2))
    with default_dtype(torch.bfloat16):
        got = in_new_thread(lambda: encode(rows, qtype, threads=2))
    assert np.array_equal(got, expected)


@pytest.fixture(scope="module")
def small_trio(tmp_path_factory):
    return float32_trio_in(tmp_path_factory.mktemp("trio"), layers=1)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_merge_is_the_same_whatever_the_default_dtype(method, small_trio, tmp_path):
    text = recipe_for_method(method, *small_trio)
    in_new_thread(lambda: run_merge(recipe(text), MergeSettings(tmp_path / "float32", seed=7)))
    with default_dtype(torch.bfloat16):
        in_new_thread(lambda: run_merge(recipe(text), MergeSettings(tmp_path / "bfloat16", seed=7)))
    assert (tmp_path / "bfloat16" / "model.safetensors").read_bytes() == \
        (tmp_path / "float32" / "model.safetensors").read_bytes()
