"""The task-vector family as one table: each method is a choice of sparsifier, sign consensus and defaults over
the one merge of `_task_vectors` (docs/spec/merge-methods.md §2), as mergekit's generalized task arithmetic
declares them."""

from __future__ import annotations

from guiapp.merging.methods._task_vectors import Sparsifier, task_vector_method
from guiapp.merging.methods.base import MergeMethod, WorkingCopies

_ARXIV = "https://arxiv.org/abs/"

# name, title, sparsifier, sign consensus, `normalize` and `rescale` defaults, working copies (constant, per input),
# paper, summary
_TABLE = (
    # Ilharco et al. 2023, "Editing models with task arithmetic"
    ("task_arithmetic", "Task arithmetic", None, False, False, False, (0.0, 1.0), "2212.04089",
     "Adds each model's changes from the base, scaled by its weight."),
    # Yadav et al. 2023: trim small changes, elect a sign per entry, merge the agreeing ones
    ("ties", "TIES", Sparsifier.MAGNITUDE, True, True, False, (4.2, 0.4), "2306.01708",
     "Keeps each model's largest changes, then adds only those that agree in sign with the majority."),
    # Yu et al. 2023, "Language models are Super Mario"
    ("dare_ties", "DARE + TIES", Sparsifier.RANDOM, True, False, True, (3.0, 0.5), "2311.03099",
     "Randomly drops changes and rescales the rest, then adds those that agree in sign with the majority."),
    ("dare_linear", "DARE (linear)", Sparsifier.RANDOM, False, False, True, (3.0, 0.5), "2311.03099",
     "Randomly drops changes, rescales the rest and adds them, scaled by weight."),
    # Davari & Belilovsky 2023: drop the tiny and the outlier changes
    ("breadcrumbs", "Model Breadcrumbs", Sparsifier.OUTLIERS, False, False, False, (1.6, 0.9), "2312.06795",
     "Drops each model's smallest and largest (outlier) changes, then adds the rest, scaled by weight."),
    ("breadcrumbs_ties", "Model Breadcrumbs + TIES", Sparsifier.OUTLIERS, True, False, False, (2.3, 0.75),
     "2312.06795",
     "Drops each model's smallest and outlier changes, then adds those that agree in sign with the majority."),
    # Deep et al. 2024: drop changes with a probability that falls with their magnitude
    ("della", "DELLA", Sparsifier.DELLA, True, True, True, (2.5, 1.65), "2406.11617",
     "Randomly drops changes, small ones more often, rescales, and adds those that agree in sign."),
    ("della_linear", "DELLA (linear)", Sparsifier.DELLA, False, False, True, (2.5, 1.65), "2406.11617",
     "Randomly drops changes, small ones more often, rescales the rest and adds them, scaled by weight."),
)

TASK_VECTOR_METHODS: dict[str, MergeMethod] = {
    name: task_vector_method(name=name, title=title, summary=summary, paper=_ARXIV + paper, sparsifier=sparsifier,
                             consensus=consensus, normalize=normalize, rescale=rescale,
                             working_copies=WorkingCopies(*copies))
    for name, title, sparsifier, consensus, normalize, rescale, copies, paper, summary in _TABLE
}
