"""Running a job's code as a job runs it, with torch's default dtype set the way another thread may set it.

transformers sets the default dtype to the model's (bfloat16, say) while it builds a model, for the whole process;
a job's results must not depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import torch

Result = TypeVar("Result")


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """torch's default dtype set to `dtype`, as transformers sets it while it builds a model."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def in_new_thread(work: Callable[[], Result]) -> Result:
    """`work()` in a new thread, as a job runs, so that nothing it keeps per thread was made before."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(work).result()
