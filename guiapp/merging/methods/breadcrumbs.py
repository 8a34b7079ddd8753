"""Model Breadcrumbs (Davari & Belilovsky 2023): drop the tiny and the outlier changes."""

from __future__ import annotations

from guiapp.merging.methods._task_vectors import Sparsifier, task_vector_method
from guiapp.merging.methods.base import WorkingCopies

METHOD = task_vector_method(
    name="breadcrumbs",
    title="Model Breadcrumbs",
    summary="Drops each model's smallest and largest (outlier) changes, then adds the rest, scaled by weight.",
    paper="https://arxiv.org/abs/2312.06795",
    sparsifier=Sparsifier.OUTLIERS,
    consensus=False,
    normalize=False,
    rescale=False,
    working_copies=WorkingCopies(1.6, 0.9),
)
