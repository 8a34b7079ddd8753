"""DELLA (Deep et al. 2024): drop changes with a probability that falls with their magnitude, then TIES."""

from __future__ import annotations

from guiapp.merging.methods._task_vectors import Sparsifier, task_vector_method
from guiapp.merging.methods.base import WorkingCopies

METHOD = task_vector_method(
    name="della",
    title="DELLA",
    summary="Randomly drops changes, small ones more often, rescales, and adds those that agree in sign.",
    paper="https://arxiv.org/abs/2406.11617",
    sparsifier=Sparsifier.DELLA,
    consensus=True,
    normalize=True,
    rescale=True,
    working_copies=WorkingCopies(2.5, 1.65),
)
