"""The task-vector family: each method is a choice of sparsifier, sign consensus and defaults over the one merge
of `_task_vectors` (docs/spec/merge-methods.md §2), as mergekit's generalized task arithmetic declares them; the
declarations (and each method's sparsifier) are guiapp.merging.method_declarations.TASK_VECTORS."""

from __future__ import annotations

from guiapp.merging.method_declarations import SPARSIFIERS, TASK_VECTORS
from guiapp.merging.methods._task_vectors import task_vector_method
from guiapp.merging.methods.base import MergeMethod, WorkingCopies

# name: sign consensus, working copies (constant, per input)
_IMPLEMENTATIONS = {
    "task_arithmetic": (False, (0.0, 1.0)),
    "ties": (True, (4.2, 0.4)),
    "dare_ties": (True, (3.0, 0.5)),
    "dare_linear": (False, (3.0, 0.5)),
    "breadcrumbs": (False, (1.6, 0.9)),
    "breadcrumbs_ties": (True, (2.3, 0.75)),
    "della": (True, (2.5, 1.65)),
    "della_linear": (False, (2.5, 1.65)),
}

TASK_VECTOR_METHODS: dict[str, MergeMethod] = {
    name: task_vector_method(declaration, sparsifier=SPARSIFIERS[name], consensus=_IMPLEMENTATIONS[name][0],
                             working_copies=WorkingCopies(*_IMPLEMENTATIONS[name][1]))
    for name, declaration in TASK_VECTORS.items()
}
