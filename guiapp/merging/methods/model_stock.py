"""Model Stock (Jang et al. 2024): move from the base toward the models' average by how much they agree."""

from __future__ import annotations

import torch

from guiapp.errors import IncompatibleModelsError
from guiapp.merging.method_declarations import MODEL_STOCK
from guiapp.merging.methods import _reduce
from guiapp.merging.methods.base import LoneTensorPolicy, MergeContext, MergeMethod, WorkingCopies

_NORM_PRODUCT_CLAMP = 1e-6
_DENOMINATOR_EPS = 1e-6


def model_stock(base: torch.Tensor, tensors: list[torch.Tensor], *, filter_wise: bool) -> torch.Tensor:
    """t·mean(x_i) + (1−t)·b with t = N·cos/(1+(N−1)·cos), cos the mean pairwise cosine of the task vectors.

    With `filter_wise`, cos and t are per row (vectors along the last dim; a 1-D tensor is one row).
    """
    width = base.shape[-1] if (filter_wise and base.dim()) else base.numel()
    deltas = [(x - base).reshape(-1, width) for x in tensors]
    cosines = []
    for i in range(len(deltas)):
        for j in range(i + 1, len(deltas)):
            squares_i, squares_j, crossed = _reduce.vector_gram(deltas[i], deltas[j])
            products = (squares_i.sqrt_() * squares_j.sqrt_()).clamp_(min=_NORM_PRODUCT_CLAMP)
            cosines.append(crossed.div_(products).clamp_(-1.0, 1.0))
    del deltas
    cos = torch.stack(cosines).mean(dim=0)
    n = len(tensors)
    denominator = 1 + (n - 1) * cos
    t = torch.where(denominator.abs() < _DENOMINATOR_EPS, torch.zeros_like(cos), n * cos / denominator)
    t = t.to(base.dtype).view(-1, 1)
    average = tensors[0].clone(memory_format=torch.contiguous_format)
    for x in tensors[1:]:
        average.add_(x)
    average.div_(n)
    rows = average.view(-1, width)
    rows.mul_(t).add_(base.reshape(-1, width) * (1 - t))
    return average


def merge(ctx: MergeContext) -> torch.Tensor:
    base = ctx.base
    inputs = ctx.non_base()
    if base is None or len(inputs) < 2:
        raise IncompatibleModelsError(
            f"Model Stock needs the base and at least two other models for {ctx.tensor_name}, but only "
            f"{len(inputs) + (base is not None)} of the inputs have it.",
            hint="Use models that all have this tensor.",
        )
    return model_stock(base, [ctx.tensors[i] for i in inputs], filter_wise=bool(ctx.params["filter_wise"]))


def _check_inputs(n_non_base: int, has_base: bool) -> str | None:
    if has_base and n_non_base >= 2:
        return None
    found = f"{n_non_base} other model{'' if n_non_base == 1 else 's'}" if has_base else "no base_model"
    return (
        "Model Stock needs a base_model and at least two other models fine-tuned from it, "
        f"but the recipe has {found}"
    )


METHOD = MergeMethod.implementing(
    MODEL_STOCK,
    merge=merge,
    working_copies=WorkingCopies(0.0, 2.0),
    lone_tensor=LoneTensorPolicy.MODEL_STOCK,
    check_inputs=_check_inputs,
)
