"""Devices for tests that need one this machine lacks, whatever torch build and GPUs it has."""

from __future__ import annotations


def absent_cuda_device() -> str:
    """A CUDA device id no GPU here answers to: one past the last device torch sees ("cuda:0" on a CPU-only torch)."""
    import torch  # noqa: PLC0415 - only the tests that ask pay for torch

    return f"cuda:{torch.cuda.device_count()}"
