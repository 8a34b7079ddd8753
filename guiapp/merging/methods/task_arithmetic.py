"""Task arithmetic (Ilharco et al. 2023, "Editing models with task arithmetic")."""

from __future__ import annotations

from guiapp.merging.methods._task_vectors import task_vector_method
from guiapp.merging.methods.base import WorkingCopies

METHOD = task_vector_method(
    name="task_arithmetic",
    title="Task arithmetic",
    summary="Adds each model's changes from the base, scaled by its weight.",
    paper="https://arxiv.org/abs/2212.04089",
    sparsifier=None,
    consensus=False,
    normalize=False,
    rescale=False,
    working_copies=WorkingCopies(0.0, 1.0),
)
