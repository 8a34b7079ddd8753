"""The one dtype table against torch and safetensors themselves, and the names it accepts for writing."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import save

from guiapp.checkpoints.reading import dtype_from_name
from guiapp.facts.dtypes import (
    ADAPTER_WRITABLE,
    BY_CODE,
    COMPUTE,
    PROBED,
    TABLE,
    TORCH_WORD,
    WRITABLE,
    compute_for,
    dtype_name,
    torch_word_name,
    writable_name,
)
from guiapp.merging.recipe import parse_recipe


@pytest.mark.parametrize("row", [row for row in TABLE if row.readable], ids=lambda row: row.name)
def test_each_row_is_what_torch_and_safetensors_say(row):
    tensor = torch.zeros(3, dtype=getattr(torch, row.name))
    data = save({"t": tensor})
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])["t"]
    assert header["dtype"] == row.code
    assert header["data_offsets"][1] - header["data_offsets"][0] == 3 * row.bytes == 3 * tensor.itemsize
    assert dtype_name(tensor.dtype) == dtype_name(str(tensor.dtype)) == row.name


def test_codes_and_names_are_unique():
    assert len(BY_CODE) == len({row.name for row in TABLE}) == len(TABLE)


def test_the_lists_the_window_and_the_probe_show():
    assert WRITABLE == ("bfloat16", "float16", "float32", "float64")
    assert ADAPTER_WRITABLE == ("bfloat16", "float16", "float32")
    assert PROBED == ("float32", "float64", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
    assert COMPUTE == ("float32", "float64")
    assert [compute_for(name) for name in PROBED] == ["float32", "float64", "float32", "float32", "float32", "float32"]


@pytest.mark.parametrize(("spelling", "name"), [
    ("bf16", "bfloat16"), ("BFloat16", "bfloat16"), ("torch.float16", "float16"), ("half", "float16"),
    ("fp32", "float32"), ("float", "float32"), ("fp64", "float64"), ("double", "float64"), ("Double", "float64"),
])
def test_every_spelling_of_a_writable_dtype(spelling, name):
    assert writable_name(spelling) == name
    assert dtype_from_name(spelling) is getattr(torch, name)


@pytest.mark.parametrize("spelling", ["float8_e4m3fn", "int8", "auto", "", "torch.bool"])
def test_what_cannot_be_written_is_refused_in_words(spelling):
    with pytest.raises(ValueError, match="is not a dtype Mergesmith can write \\(use bfloat16, float16, float32 or"):
        writable_name(spelling)


def test_a_recipe_may_name_double_as_the_checkpoint_reader_does():
    recipe = parse_recipe("merge_method: linear\nmodels:\n  - model: ./a\n    parameters: {weight: 1.0}\n"
                          "dtype: double\nout_dtype: bf16\n")
    assert (recipe.dtype, recipe.out_dtype) == ("float64", "bfloat16")


def test_the_dtypes_of_a_real_mixed_dtype_error_are_named():
    with pytest.raises(RuntimeError) as raised:
        torch.ones(2, 2, dtype=torch.float32) @ torch.ones(2, 2, dtype=torch.bfloat16)
    assert {torch_word_name(word) for word in TORCH_WORD.findall(str(raised.value))} == {"float32", "bfloat16"}
