"""Model Breadcrumbs with TIES sign consensus (Davari & Belilovsky 2023)."""

from __future__ import annotations

from guiapp.merging.methods._task_vectors import Sparsifier, task_vector_method
from guiapp.merging.methods.base import WorkingCopies

METHOD = task_vector_method(
    name="breadcrumbs_ties",
    title="Model Breadcrumbs + TIES",
    summary="Drops each model's smallest and outlier changes, then adds those that agree in sign with the majority.",
    paper="https://arxiv.org/abs/2312.06795",
    sparsifier=Sparsifier.OUTLIERS,
    consensus=True,
    normalize=False,
    rescale=False,
    working_copies=WorkingCopies(2.3, 0.75),
)
