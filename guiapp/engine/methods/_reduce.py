"""Whole-tensor reductions accumulated in float64, chunk by chunk.

float32 accumulation drifts on large tensors (torch 2.13's float32 `vector_norm` is off by 0.5 % at 67 M
elements), and casting a whole tensor to float64 first would need two extra copies of it; chunks of about a
million entries keep the float64 temporaries small.
"""

from __future__ import annotations

import math
from typing import Iterator

import torch

_CHUNK = 1 << 20


def _chunks(*tensors: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
    flats = [t.reshape(-1) for t in tensors]
    for start in range(0, flats[0].numel(), _CHUNK):
        yield tuple(f[start : start + _CHUNK].double() for f in flats)


def sum_abs(x: torch.Tensor) -> float:
    """The L1 norm of `x` (sum of absolute values)."""
    return math.fsum(float(c.abs().sum()) for (c,) in _chunks(x))


def dot(a: torch.Tensor, b: torch.Tensor) -> float:
    """The dot product of `a` and `b` flattened (same number of entries)."""
    return math.fsum(float(torch.dot(ca, cb)) for ca, cb in _chunks(a, b))


def norm(x: torch.Tensor) -> float:
    """The Euclidean norm of `x` flattened."""
    return math.sqrt(dot(x, x))


def mean_square(x: torch.Tensor) -> float:
    """The mean of the squared entries of `x` (0 for an empty tensor)."""
    return dot(x, x) / x.numel() if x.numel() else 0.0


def row_dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Dot products of matching rows (vectors along the last dim) of `a` and `b`, as a float64 vector.

    1-D tensors count as one row. Works on non-contiguous views (e.g. transposed for column vectors).
    """
    width = a.shape[-1] if a.dim() else 1
    rows_a, rows_b = a.reshape(-1, width), b.reshape(-1, width)
    step = max(1, _CHUNK // max(width, 1))
    parts = [
        (rows_a[start : start + step].double() * rows_b[start : start + step].double()).sum(dim=1)
        for start in range(0, rows_a.shape[0], step)
    ]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64, device=a.device)
