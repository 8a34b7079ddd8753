"""Every merge method's declaration: its name, the window's words for it, its group, base role and parameters,
in the order the window lists them (one fact, here; guiapp.merging.methods attaches each its merge function).

Torch-free: the window reads these at once, before the merge engine (torch) has loaded.
"""

from __future__ import annotations

from enum import Enum

from guiapp.merging.method_schema import (
    BLEND,
    COMBINE_FINE_TUNES,
    STACK_LAYERS,
    BaseRole,
    MethodDeclaration,
    ParamKind,
    ParamSpec,
)

LINEAR = MethodDeclaration(
    name="linear",
    title="Linear (weighted average)",
    summary="Averages the models' weights, each scaled by its weight.",
    paper="https://arxiv.org/abs/2203.05482",
    base_role=BaseRole.INPUT,
    params=(
        ParamSpec("weight", ParamKind.FLOAT, required=True, per_model=True, help="How much this model counts."),
        ParamSpec("normalize", ParamKind.BOOL, default=True, help="Divide by the sum of the weights."),
    ),
    group=BLEND,
)


class Sparsifier(str, Enum):
    MAGNITUDE = "magnitude"  # TIES: keep the largest |δ|
    RANDOM = "random"  # DARE: keep each entry with probability d
    OUTLIERS = "outliers"  # Breadcrumbs: drop the largest gamma·N and the smallest, keep d·N in between
    DELLA = "della"  # DELLA: keep with a probability that grows with the entry's rank in its row


def _task_vector_params(sparsifier: Sparsifier | None, normalize: bool, rescale: bool) -> tuple[ParamSpec, ...]:
    """A task-vector method's parameters (docs/spec/merge-methods.md §2's table): those of its sparsifier, and
    `normalize` and `rescale` with the method's defaults."""
    params = [
        ParamSpec(
            "weight", ParamKind.FLOAT, required=True, per_model=True,
            help="How strongly this model's changes count (negative subtracts them).",
        ),
    ]
    if sparsifier is not None:
        params.append(
            ParamSpec(
                # Below 0 mergekit's DARE fails and its breadcrumbs keeps a garbled selection.
                "density", ParamKind.FLOAT, default=1.0, per_model=True, minimum=0.0, usual=(0.0, 1.0),
                unusual="a density above 1 keeps every change, as 1 does",
                help="Fraction of this model's changes to keep (1 keeps all).",
            )
        )
    if sparsifier is Sparsifier.OUTLIERS:
        params.append(
            ParamSpec(
                "gamma", ParamKind.FLOAT, default=0.01, per_model=True, minimum=0.0, usual=(0.0, 1.0),
                unusual="at most 1 − density of the largest changes can be dropped",
                help="Fraction of the largest changes dropped as outliers.",
            )
        )
    if sparsifier is Sparsifier.DELLA:
        params.append(
            ParamSpec(
                # Below 0 the keep probability would fall with the size of a change: the method's ranking turned around.
                # Above 0.5 only a density of 0 or 1 (which ignore it) passes the check of density ± epsilon.
                "epsilon", ParamKind.FLOAT, default=0.15, per_model=True, minimum=0.0, usual=(0.0, 0.5),
                unusual="it is used only with a density of 0 or 1, which ignore it",
                help="How far the keep probability moves with rank, from density − epsilon (smallest changes) to density + "
                "epsilon (largest); both must stay between 0 and 1: density − epsilon > 0 and density + epsilon < 1.",
            )
        )
    if sparsifier is not None:
        params.append(
            ParamSpec(
                "rescale", ParamKind.BOOL, default=rescale,
                help="Scale the kept changes up so their total size (L1) matches the unpruned changes.",
            )
        )
    params += [
        ParamSpec(
            "normalize", ParamKind.BOOL, default=normalize,
            help="Divide the combined changes by the sum of the weights that contributed.",
        ),
        ParamSpec("lambda", ParamKind.FLOAT, default=1.0, help="Multiplies the combined changes before adding them."),
        ParamSpec(
            "int8_mask", ParamKind.BOOL, default=False,
            help="Accepted for mergekit recipes; only saves memory there, no effect on the result.",
        ),
    ]
    return tuple(params)


_ARXIV = "https://arxiv.org/abs/"

# name, title, sparsifier, `normalize` and `rescale` defaults, paper, summary (as mergekit's generalized task
# arithmetic declares them)
_TASK_VECTOR_TABLE = (
    # Ilharco et al. 2023, "Editing models with task arithmetic"
    ("task_arithmetic", "Task arithmetic", None, False, False, "2212.04089",
     "Adds each model's changes from the base, scaled by its weight."),
    # Yadav et al. 2023: trim small changes, elect a sign per entry, merge the agreeing ones
    ("ties", "TIES", Sparsifier.MAGNITUDE, True, False, "2306.01708",
     "Keeps each model's largest changes, then adds only those that agree in sign with the majority."),
    # Yu et al. 2023, "Language models are Super Mario"
    ("dare_ties", "DARE + TIES", Sparsifier.RANDOM, False, True, "2311.03099",
     "Randomly drops changes and rescales the rest, then adds those that agree in sign with the majority."),
    ("dare_linear", "DARE (linear)", Sparsifier.RANDOM, False, True, "2311.03099",
     "Randomly drops changes, rescales the rest and adds them, scaled by weight."),
    # Davari & Belilovsky 2023: drop the tiny and the outlier changes
    ("breadcrumbs", "Model Breadcrumbs", Sparsifier.OUTLIERS, False, False, "2312.06795",
     "Drops each model's smallest and largest (outlier) changes, then adds the rest, scaled by weight."),
    ("breadcrumbs_ties", "Model Breadcrumbs + TIES", Sparsifier.OUTLIERS, False, False, "2312.06795",
     "Drops each model's smallest and outlier changes, then adds those that agree in sign with the majority."),
    # Deep et al. 2024: drop changes with a probability that falls with their magnitude
    ("della", "DELLA", Sparsifier.DELLA, True, True, "2406.11617",
     "Randomly drops changes, small ones more often, rescales, and adds those that agree in sign."),
    ("della_linear", "DELLA (linear)", Sparsifier.DELLA, False, True, "2406.11617",
     "Randomly drops changes, small ones more often, rescales the rest and adds them, scaled by weight."),
)

# Which changes each task-vector method drops (None: none), for its parameters here and its merge function.
SPARSIFIERS: dict[str, Sparsifier | None] = {row[0]: row[2] for row in _TASK_VECTOR_TABLE}

TASK_VECTORS: dict[str, MethodDeclaration] = {
    name: MethodDeclaration(name=name, title=title, summary=summary, paper=_ARXIV + paper,
                            base_role=BaseRole.REQUIRED, params=_task_vector_params(sparsifier, normalize, rescale),
                            group=COMBINE_FINE_TUNES)
    for name, title, sparsifier, normalize, rescale, paper, summary in _TASK_VECTOR_TABLE
}


SLERP = MethodDeclaration(
    name="slerp",
    title="SLERP (spherical interpolation)",
    summary="Blends the base with one other model along the arc between them, keeping the weights' scale.",
    paper="https://en.wikipedia.org/wiki/Slerp",
    base_role=BaseRole.REQUIRED,
    params=(
        ParamSpec(
            "t", ParamKind.FLOAT, required=True, usual=(0.0, 1.0),
            unusual="the result lies beyond the two models, along the arc through them",
            help="Position along the arc: 0 gives the base model, 1 the other model.",
        ),
    ),
    group=BLEND,
)


NUSLERP = MethodDeclaration(
    name="nuslerp",
    title="NuSLERP (weighted spherical interpolation)",
    summary="Blends two models by weight along the arc between them, per tensor, row or column.",
    paper="https://github.com/arcee-ai/mergekit/blob/main/docs/merge_methods.md",
    base_role=BaseRole.OPTIONAL,
    params=(
        ParamSpec(
            "weight", ParamKind.FLOAT, required=True, per_model=True,
            help="This model's share: t = second weight / (sum of both).",
        ),
        ParamSpec(
            "nuslerp_flatten", ParamKind.BOOL, default=True,
            help="Treat each tensor as one vector; off: interpolate each row (or column) separately.",
        ),
        ParamSpec(
            "nuslerp_row_wise", ParamKind.BOOL, default=False,
            help="When not flattened: interpolate column vectors instead of row vectors (mergekit's naming).",
        ),
    ),
    group=BLEND,
)


MULTISLERP = MethodDeclaration(
    name="multislerp",
    title="Multi-SLERP (spherical interpolation of many models)",
    summary="Averages any number of models on the sphere by weight, keeping the weights' typical scale.",
    paper="https://goddard.blog/posts/multislerp-wow-what-a-cool-idea",
    base_role=BaseRole.OPTIONAL,
    params=(
        ParamSpec("weight", ParamKind.FLOAT, required=True, per_model=True, help="How much this model counts."),
        ParamSpec(
            "normalize_weights", ParamKind.BOOL, default=True, help="Divide the weights by their sum first."
        ),
        ParamSpec(
            # Below 0 it could cancel a norm it is added to: a division by zero.
            "eps", ParamKind.FLOAT, default=1e-8, minimum=0.0, usual=(0.0, 1e-2),
            unusual="it shrinks the merged directions noticeably",
            help="Small constant that keeps divisions by tiny norms finite.",
        ),
    ),
    group=BLEND,
)


KARCHER = MethodDeclaration(
    name="karcher",
    title="Karcher mean",
    summary="Finds the geodesic average of all the models' weights on the sphere, every model counting equally.",
    paper="https://en.wikipedia.org/wiki/Karcher_mean",
    base_role=BaseRole.INPUT,
    params=(
        ParamSpec(
            "max_iter", ParamKind.INT, default=10, usual=(1, 1000),
            unusual="many steps may make the merge take long; 0 or fewer refine nothing (the plain average's direction)",
            help="Most refinement steps per tensor.",
        ),
        ParamSpec(
            # Below 0 every all-zero tensor would count, divided by its norm of 0.
            "tol", ParamKind.FLOAT, default=1e-5, minimum=0.0, usual=(0.0, 1.0),
            unusual="tensors whose size is below it come out as zeros",
            help="Stop refining when a step is shorter than this.",
        ),
    ),
    group=BLEND,
)


MODEL_STOCK = MethodDeclaration(
    name="model_stock",
    title="Model Stock",
    summary="Moves from the base toward the models' average, further the more their changes agree.",
    paper="https://arxiv.org/abs/2403.19522",
    base_role=BaseRole.REQUIRED,
    params=(
        ParamSpec(
            "filter_wise", ParamKind.BOOL, default=False,
            help="Measure agreement per row (output filter) instead of per tensor.",
        ),
    ),
    group=COMBINE_FINE_TUNES,
)


SCE = MethodDeclaration(
    name="sce",
    title="SCE (select, calculate, erase)",
    summary="Keeps the changes the models disagree on most, weights models by change size, drops sign conflicts.",
    paper="https://arxiv.org/abs/2408.07990",
    base_role=BaseRole.REQUIRED,
    params=(
        ParamSpec(
            "select_topk", ParamKind.FLOAT, default=1.0, usual=(0.0, 1.0),
            unusual="above 1 every position is kept, as at 1; below 0 none, as at 0",
            help="Fraction of positions kept, those where the models differ most (1 keeps all).",
        ),
        ParamSpec(
            "int8_mask", ParamKind.BOOL, default=False,
            help="Accepted for mergekit recipes; only saves memory there, no effect on the result.",
        ),
    ),
    group=COMBINE_FINE_TUNES,
)


NEARSWAP = MethodDeclaration(
    name="nearswap",
    title="NearSwap",
    summary="Takes the other model's weights where they are close to the base, keeps the base where they differ.",
    paper="https://huggingface.co/alchemonaut/QuartetAnemoi-70B-t0.0001",
    base_role=BaseRole.REQUIRED,
    params=(
        ParamSpec(
            "t", ParamKind.FLOAT, required=True, usual=(0.0, 1.0), label="Swap in differences up to (t)",
            unusual="below 0 nothing is swapped in (the base is kept); above 1 nearly everything is",
            suggested=0.0001,  # the threshold of the method's reference model (QuartetAnemoi-70B-t0.0001)
            help="Closeness threshold: differences up to t are swapped in fully, larger ones in proportion.",
        ),
    ),
    group=BLEND,
)


ARCEE_FUSION = MethodDeclaration(
    name="arcee_fusion",
    title="Arcee Fusion",
    summary="Takes the other model's changes only where they change the base's behaviour most, keeps the rest.",
    paper="https://github.com/arcee-ai/mergekit/blob/main/docs/merge_methods.md",
    base_role=BaseRole.REQUIRED,
    params=(),
    group=BLEND,
)


_EPSILON = ParamSpec(
    # RAM+ divides by counts floored at epsilon: at 0 a row without unique changes would give 0 / 0.
    "epsilon", ParamKind.FLOAT, default=1e-5, minimum=0.0, usual=(0.0, 1.0),
    unusual="changes smaller than it count as no change", label="Counts as changed above (ε)",
    help="A change larger than this counts as the model having changed that weight.",
)


def _ram(*, boosted: bool) -> MethodDeclaration:
    """RAM (boosted=False) or RAM+ tensor-local (boosted=True, with r and alpha)."""
    params = [_EPSILON]
    if boosted:
        params += [
            ParamSpec(
                "r", ParamKind.FLOAT, default=0.1, usual=(0.0, 10.0),
                unusual="a model's unique changes are boosted (or, below 0, shrunk) that much",
                help="How much a model's unique changes are boosted for the changes it shares.",
            ),
            ParamSpec(
                "alpha", ParamKind.FLOAT, default=0.2, usual=(0.0, 10.0),
                unusual="the boost is capped there",
                help="Cap on the shared-to-unique ratio used for the boost.",
            ),
        ]
    return MethodDeclaration(
        name="ramplus_tl" if boosted else "ram",
        title="RAM+ (tensor-local)" if boosted else "RAM (reinforced agent merging)",
        summary=(
            "Like RAM, and boosts each model's unique changes by how much it also shares with the others."
            if boosted
            else "Keeps each model's unique changes as they are and averages changes several models made."
        ),
        paper="https://arxiv.org/abs/2601.13572",
        base_role=BaseRole.REQUIRED,
        params=tuple(params),
        group=COMBINE_FINE_TUNES,
    )


RAM = _ram(boosted=False)
RAMPLUS_TL = _ram(boosted=True)


PASSTHROUGH = MethodDeclaration(
    name="passthrough",
    title="Passthrough (copy, stack layers)",
    summary="Copies tensors unchanged; with slices, stacks layers from different models (a frankenmerge).",
    paper=None,
    base_role=BaseRole.INPUT,
    params=(
        ParamSpec("scale", ParamKind.FLOAT, default=1.0, per_model=True, help="Multiplies this model's tensors."),
    ),
    group=STACK_LAYERS,
)


# Every method, in the order the window lists them within their groups.
DECLARATIONS: dict[str, MethodDeclaration] = {
    declaration.name: declaration
    for declaration in (
        LINEAR,
        *TASK_VECTORS.values(),
        SLERP,
        NUSLERP,
        MULTISLERP,
        KARCHER,
        MODEL_STOCK,
        SCE,
        RAM,
        RAMPLUS_TL,
        NEARSWAP,
        ARCEE_FUSION,
        PASSTHROUGH,
    )
}
