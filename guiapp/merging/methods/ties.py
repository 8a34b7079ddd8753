"""TIES (Yadav et al. 2023): trim small changes, elect a sign per entry, merge the agreeing ones."""

from __future__ import annotations

from guiapp.merging.methods._task_vectors import Sparsifier, task_vector_method
from guiapp.merging.methods.base import WorkingCopies

METHOD = task_vector_method(
    name="ties",
    title="TIES",
    summary="Keeps each model's largest changes, then adds only those that agree in sign with the majority.",
    paper="https://arxiv.org/abs/2306.01708",
    sparsifier=Sparsifier.MAGNITUDE,
    consensus=True,
    normalize=True,
    rescale=False,
    working_copies=WorkingCopies(4.2, 0.4),
)
