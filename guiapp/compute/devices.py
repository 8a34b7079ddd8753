"""Choosing the torch device a job computes on, with a clear refusal when it is not there."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from guiapp.errors import ON_CPU, DeviceError, Remedy


def resolve_device(name: str) -> torch.device:
    """Turn "cpu", "cuda", "cuda:1", "mps" or "xpu" into a device that exists on this machine.

    Raises DeviceError saying what is missing (a CPU-only torch build, no such GPU) and offering the CPU.
    """
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DeviceError(
            f'"{name}" is not a device name.',
            hint="Use cpu, cuda, cuda:N, mps or xpu.",
            remedy=ON_CPU,
        ) from None
    if device.type == "cpu":
        return device
    backend = {"cuda": torch.cuda, "mps": torch.backends.mps, "xpu": getattr(torch, "xpu", None)}.get(device.type)
    if backend is None or not backend.is_available():
        build = "a CPU-only build of PyTorch" if device.type != "mps" else "PyTorch without Apple GPU support"
        raise DeviceError(
            f"The device {name} is not available: this machine has no such GPU, or Mergesmith runs on {build}.",
            hint="Run on the CPU, or install the PyTorch build for your GPU (see the README).",
            remedy=ON_CPU,
        )
    if device.type in ("cuda", "xpu") and device.index is not None and device.index >= backend.device_count():
        raise DeviceError(
            f"There is no GPU number {device.index}: this machine has {backend.device_count()}.",
            hint=f"Use {device.type}:0" + (f" to {device.type}:{backend.device_count() - 1}" if backend.device_count() > 1 else "") + ".",
            remedy=Remedy("device", f"{device.type}:0", f"on {device.type}:0"),
        )
    return device


def use_cpu_threads(count: int) -> None:
    """Let torch operations started from the calling thread use `count` CPU threads (see guiapp/system/threads.py)."""
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)


@contextmanager
def threads_restored() -> Iterator[None]:
    """Inside, a job sets the calling thread's torch thread count per piece of work; afterwards it is what it was."""
    before = torch.get_num_threads()
    try:
        yield
    finally:
        use_cpu_threads(before)
