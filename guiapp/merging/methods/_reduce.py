"""Whole-tensor reductions accumulated in float64, a chunk at a time.

float32 accumulation drifts on large tensors (torch 2.13's float32 `vector_norm` is off by 0.5 % at 67 M
elements), and casting a whole tensor to float64 first would need two extra copies of it. Each chunk of about a
million entries is copied into one float64 buffer allocated per call and reused: fresh allocations of the
chunks cost more than the arithmetic on CPUs (page faults), so the buffers are what keep this fast. Products
go through matmul/bmm (BLAS): torch.dot and sum(dim=1) in float64 are 8-14x slower on CPU.
"""

from __future__ import annotations

import math

import torch

_CHUNK = 1 << 20


def _flat_chunks(x: torch.Tensor):
    flat = x.reshape(-1)
    for start in range(0, flat.numel(), _CHUNK):
        yield start, flat[start : start + _CHUNK]


def _buffer(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(min(_CHUNK, x.numel()), dtype=torch.float64, device=x.device)


def sum_abs(x: torch.Tensor) -> float:
    """The L1 norm of `x` (sum of absolute values)."""
    buffer = _buffer(x)
    partials = []
    for _, chunk in _flat_chunks(x):
        part = buffer[: chunk.numel()]
        partials.append(part.copy_(chunk).abs_().sum())
    return math.fsum(float(p) for p in partials)


def dots(a: torch.Tensor, others: list[torch.Tensor]) -> list[float]:
    """The dot products of `a` with each of `others` (flattened), converting each chunk of `a` only once."""
    buffer_a, buffer_other = _buffer(a), _buffer(a)
    flats = [other.reshape(-1) for other in others]
    partials: list[list[torch.Tensor]] = [[] for _ in others]
    for start, chunk in _flat_chunks(a):
        n = chunk.numel()
        part_a = buffer_a[:n].copy_(chunk)
        for flat, sums in zip(flats, partials):
            sums.append(part_a @ buffer_other[:n].copy_(flat[start : start + n]))
    return [math.fsum(float(p) for p in sums) for sums in partials]


def gram(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float]:
    """(a·a, b·b, a·b) of `a` and `b` flattened, in one pass over both (each converted to float64 once)."""
    buffer_a, buffer_b = _buffer(a), _buffer(b)
    flat_b = b.reshape(-1)
    squares_a, squares_b, crossed = [], [], []
    for start, chunk in _flat_chunks(a):
        n = chunk.numel()
        part_a, part_b = buffer_a[:n].copy_(chunk), buffer_b[:n].copy_(flat_b[start : start + n])
        squares_a.append(part_a @ part_a)
        squares_b.append(part_b @ part_b)
        crossed.append(part_a @ part_b)
    return tuple(math.fsum(float(p) for p in parts) for parts in (squares_a, squares_b, crossed))


class SquareSum:
    """Σ x² over the `numel` entries of one tensor shown in pieces, in flat order (a merge's blocks of rows): the
    same float64 sum whatever the pieces, since its chunks are a million entries of the whole tensor however the
    pieces cut them."""

    def __init__(self, numel: int) -> None:
        self._numel = numel
        self._buffer: torch.Tensor | None = None
        self._filled = 0
        self._partials: torch.Tensor | None = None
        self._chunks = 0

    def add(self, piece: torch.Tensor) -> None:
        """Add the squares of the next entries."""
        flat = piece.reshape(-1)
        if self._buffer is None:
            # Both allocated once: small pieces allocated all along a merge pass sit between its blocks' short-lived
            # buffers in the C allocator's heap and keep it from reusing their memory.
            self._buffer = torch.empty(min(_CHUNK, self._numel), dtype=torch.float64, device=flat.device)
            self._partials = torch.empty(-(-self._numel // _CHUNK), dtype=torch.float64, device=flat.device)
        start = 0
        while start < flat.numel():
            taken = min(self._buffer.numel() - self._filled, flat.numel() - start)
            self._buffer[self._filled : self._filled + taken].copy_(flat[start : start + taken])
            self._filled += taken
            start += taken
            if self._filled == self._buffer.numel():
                self._close_chunk()

    def _close_chunk(self) -> None:
        part = self._buffer[: self._filled]
        torch.matmul(part, part, out=self._partials[self._chunks])
        self._chunks += 1
        self._filled = 0

    def total(self) -> float:
        """The sum of the squares of every entry added."""
        if self._filled:
            self._close_chunk()
        return math.fsum(self._partials[: self._chunks].tolist()) if self._partials is not None else 0.0


def square_sum(x: torch.Tensor) -> float:
    """Σ x² over the entries of `x`."""
    squares = SquareSum(x.numel())
    squares.add(x)
    return squares.total()


def norm(x: torch.Tensor) -> float:
    """The Euclidean norm of `x` flattened."""
    return math.sqrt(square_sum(x))


def mean_square(x: torch.Tensor) -> float:
    """The mean of the squared entries of `x` (0 for an empty tensor)."""
    return square_sum(x) / x.numel() if x.numel() else 0.0


def vector_gram(a: torch.Tensor, b: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per vector along `dim` (-1: rows, 0: columns): (a·a, b·b, a·b) in float64, in one pass over both.

    Each result has the shape of `a` without `dim` (a 1-D tensor is a single vector: 0-d results). Works
    through contiguous chunks of rows either way, so column vectors cost no transposed copy.
    """
    if dim not in (0, -1):
        raise ValueError(f"vector_gram works along dim 0 or -1, not {dim}")
    shape = tuple(a.shape)
    if dim == -1:
        rows_a, rows_b = a.reshape(-1, shape[-1] if shape else 1), b.reshape(-1, shape[-1] if shape else 1)
        results = [torch.empty(rows_a.shape[0], dtype=torch.float64, device=a.device) for _ in range(3)]
    else:
        rows_a, rows_b = a.reshape(shape[0] if shape else 1, -1), b.reshape(shape[0] if shape else 1, -1)
        results = [torch.zeros(rows_a.shape[1], dtype=torch.float64, device=a.device) for _ in range(3)]
    n_rows, width = rows_a.shape
    out_shape = shape[:-1] if dim == -1 else shape[1:]
    if dim == -1 and width > _CHUNK:
        # Rows longer than a chunk (a flattened tensor is one row): chunk within each row instead.
        for row in range(n_rows):
            for result, value in zip(results, gram(rows_a[row], rows_b[row])):
                result[row] = value
        return tuple(result.view(out_shape) for result in results)
    step = max(1, _CHUNK // max(width, 1))
    buffer_a = torch.empty((min(step, n_rows), width), dtype=torch.float64, device=a.device)
    buffer_b = torch.empty_like(buffer_a)
    products = torch.empty_like(buffer_a)
    for start in range(0, n_rows, step):
        stop = min(start + step, n_rows)
        part_a = buffer_a[: stop - start].copy_(rows_a[start:stop])
        part_b = buffer_b[: stop - start].copy_(rows_b[start:stop])
        for result, (left, right) in zip(results, ((part_a, part_a), (part_b, part_b), (part_a, part_b))):
            if dim == -1:
                result[start:stop] = torch.bmm(left.unsqueeze(1), right.unsqueeze(2)).view(-1)
            else:
                result.add_(torch.mul(left, right, out=products[: stop - start]).sum(dim=0))
    return tuple(result.view(out_shape) for result in results)
