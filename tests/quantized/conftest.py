from __future__ import annotations

import pytest
import torch

from guiapp.engine.samples import write_llama


@pytest.fixture(scope="session")
def llama_base(tmp_path_factory):
    """A tiny bf16 Llama with a tokenizer: the model every quantized copy is made from."""
    from guiapp.engine.samples import write_byte_tokenizer  # noqa: PLC0415 - only this fixture needs it

    folder = write_llama(tmp_path_factory.mktemp("llama") / "base", dtype=torch.bfloat16)
    write_byte_tokenizer(folder)
    return folder
