from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - fixtures for the Hub model test
from tests.support.warm_cli import warm_cli  # noqa: F401 - the hostile-model cases use it
from tests.tryout.models import write_causal, write_encoder, write_lora_adapter


@pytest.fixture(scope="session")
def causal_fp32(tmp_path_factory) -> Path:
    return write_causal(tmp_path_factory.mktemp("try") / "causal-fp32", torch.float32, seed=0)


@pytest.fixture(scope="session")
def causal_fp16(tmp_path_factory) -> Path:
    return write_causal(tmp_path_factory.mktemp("try") / "causal-fp16", torch.float16, seed=1)


@pytest.fixture(scope="session")
def causal_bf16(tmp_path_factory) -> Path:
    return write_causal(tmp_path_factory.mktemp("try") / "causal-bf16", torch.bfloat16, seed=2)


@pytest.fixture(scope="session")
def bf16_adapter(causal_bf16: Path) -> Path:
    return write_lora_adapter(causal_bf16, causal_bf16.parent / "adapter", seed=3)


@pytest.fixture(scope="session")
def encoder(tmp_path_factory) -> Path:
    return write_encoder(tmp_path_factory.mktemp("try") / "encoder")
