"""DELLA without sign consensus (Deep et al. 2024)."""

from __future__ import annotations

from guiapp.merging.methods._task_vectors import Sparsifier, task_vector_method
from guiapp.merging.methods.base import WorkingCopies

METHOD = task_vector_method(
    name="della_linear",
    title="DELLA (linear)",
    summary="Randomly drops changes, small ones more often, rescales the rest and adds them, scaled by weight.",
    paper="https://arxiv.org/abs/2406.11617",
    sparsifier=Sparsifier.DELLA,
    consensus=False,
    normalize=False,
    rescale=True,
    working_copies=WorkingCopies(2.5, 1.65),
)
