"""DARE without sign consensus (Yu et al. 2023, "Language models are Super Mario")."""

from __future__ import annotations

from guiapp.merging.methods._task_vectors import Sparsifier, task_vector_method
from guiapp.merging.methods.base import WorkingCopies

METHOD = task_vector_method(
    name="dare_linear",
    title="DARE (linear)",
    summary="Randomly drops changes, rescales the rest and adds them, scaled by weight.",
    paper="https://arxiv.org/abs/2311.03099",
    sparsifier=Sparsifier.RANDOM,
    consensus=False,
    normalize=False,
    rescale=True,
    working_copies=WorkingCopies(3.0, 0.5),
)
