"""DARE with TIES sign consensus (Yu et al. 2023, "Language models are Super Mario")."""

from __future__ import annotations

from guiapp.merging.methods._task_vectors import Sparsifier, task_vector_method
from guiapp.merging.methods.base import WorkingCopies

METHOD = task_vector_method(
    name="dare_ties",
    title="DARE + TIES",
    summary="Randomly drops changes and rescales the rest, then adds those that agree in sign with the majority.",
    paper="https://arxiv.org/abs/2311.03099",
    sparsifier=Sparsifier.RANDOM,
    consensus=True,
    normalize=False,
    rescale=True,
    working_copies=WorkingCopies(3.0, 0.5),
)
