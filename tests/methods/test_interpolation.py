"""linear, slerp, nuslerp, multislerp and karcher against hand-worked values and NumPy references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from guiapp.errors import IncompatibleModelsError
from tests.methods.helpers import run

SQRT_HALF = math.sqrt(0.5)


def test_linear_weighted_average():
    result = run("linear", [[1.0, 2.0], [3.0, 6.0]], model_params=[{"weight": 1.0}, {"weight": 3.0}])
    assert result.tolist() == [2.5, 5.0]
    summed = run("linear", [[1.0, 2.0], [3.0, 6.0]], model_params=[{"weight": 1.0}, {"weight": 3.0}], normalize=False)
    assert summed.tolist() == [10.0, 20.0]


class _OperationsSeen(TorchDispatchMode):
    """The names of the torch operations run inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's signature
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("weights", "divides"), [((0.25, 0.75), False), ((1.0, 3.0), True)])
def test_linear_divides_only_by_weights_that_do_not_add_up_to_one(weights, divides):
    # Dividing by one is a pass over every block that changes nothing: the usual recipe (weights adding up to one)
    # skips it, and comes out exactly the same.
    tensors = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 6.0])]
    with _OperationsSeen() as seen:
        result = run("linear", tensors, model_params=[{"weight": w} for w in weights])
    assert any(name.startswith("div") for name in seen.names) == divides
    assert result.tolist() == [2.5, 5.0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("weights", "normalize"), [((0.2, 0.3, 0.5), True), ((1.0, 0.7, -0.4), True),
                                                    ((0.6, 0.6), False), ((0.5, 0.9, 0.2), False)])
def test_linear_of_stored_inputs_not_averaged_in_pairs_is_the_float32_merge_bit_for_bit(dtype, weights, normalize):
    # Two inputs averaged go through one lerp (its own rounding, tested with the merge loop); any other linear merge
    # of bf16/fp16 inputs goes a chunk at a time through the float32 path's operations.
    from guiapp.merging.methods._stored import STORED_CHUNK  # noqa: PLC0415
    from tests.methods.helpers import assert_stored_merge_is_the_float32_merge  # noqa: PLC0415

    generator = torch.Generator().manual_seed(len(weights))
    tensors = [torch.randn(STORED_CHUNK * 2 + 7, generator=generator) * 0.05 for _ in weights]  # the last chunk short
    assert_stored_merge_is_the_float32_merge("linear", tensors, dtype, model_params=[{"weight": w} for w in weights],
                                             normalize=normalize)


# ---- slerp -----------------------------------------------------------------------------------------------


def test_slerp_endpoints_are_exactly_the_inputs():
    generator = torch.Generator().manual_seed(0)
    base, other = torch.randn(8, 4, generator=generator), torch.randn(8, 4, generator=generator)
    assert torch.equal(run("slerp", [base, other], base_index=0, t=0.0), base)
    assert torch.equal(run("slerp", [base, other], base_index=0, t=1.0), other)
    # The base is t = 0 wherever it is listed.
    assert torch.equal(run("slerp", [other, base], base_index=1, t=0.0), base)


def test_slerp_of_orthogonal_vectors_by_hand():
    result = run("slerp", [[2.0, 0.0], [0.0, 1.0]], base_index=0, t=0.5)
    # θ = π/2: both coefficients sin(π/4)/sin(π/2), applied to the un-normalised tensors.
    assert result.tolist() == pytest.approx([2 * SQRT_HALF, SQRT_HALF], rel=1e-6)
    third = run("slerp", [[1.0, 0.0], [0.0, 1.0]], base_index=0, t=1 / 3)
    assert third.tolist() == pytest.approx([math.cos(math.pi / 6), math.sin(math.pi / 6)], rel=1e-6)


def test_slerp_matches_the_formula_on_a_matrix():
    generator = torch.Generator().manual_seed(1)
    x0, x1 = torch.randn(6, 5, generator=generator).double(), torch.randn(6, 5, generator=generator).double()
    a, b = x0.numpy().ravel(), x1.numpy().ravel()
    theta = math.acos(float(np.dot(a / np.linalg.norm(a), b / np.linalg.norm(b))))
    t = 0.3
    expected = (math.sin((1 - t) * theta) * a + math.sin(t * theta) * b) / math.sin(theta)
    result = run("slerp", [x0, x1], base_index=0, t=t, dtype=torch.float64)
    assert result.numpy().ravel() == pytest.approx(expected, rel=1e-12)


def test_slerp_falls_back_to_lerp_above_cosine_0_9995():
    x0 = [1.0, 0.0]
    almost = [2.0, 0.06]  # cos ≈ 0.99955: lerp
    assert run("slerp", [x0, almost], base_index=0, t=0.25, dtype=torch.float64).tolist() == pytest.approx(
        [0.75 + 0.5, 0.015], rel=1e-12
    )
    apart = [2.0, 0.07]  # cos ≈ 0.99939: slerp, which differs from lerp
    theta = math.acos(2.0 / math.hypot(2.0, 0.07))
    c0, c1 = math.sin(0.75 * theta) / math.sin(theta), math.sin(0.25 * theta) / math.sin(theta)
    result = run("slerp", [x0, apart], base_index=0, t=0.25, dtype=torch.float64)
    assert result.tolist() == pytest.approx([c0 + 2 * c1, 0.07 * c1], rel=1e-12)
    assert result.tolist()[0] != pytest.approx(1.25, rel=1e-9)
    opposite = run("slerp", [[1.0, 0.0], [-3.0, 0.0]], base_index=0, t=0.5)
    assert opposite.tolist() == [-1.0, 0.0]


# ---- nuslerp --------------------------------------------------------------------------------------------


def slerp_vectors(t: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NuSLERP's per-vector slerp, in NumPy float64."""
    cos = float(np.dot(a, b) / (max(np.linalg.norm(a), 1e-7) * max(np.linalg.norm(b), 1e-7)))
    cos = min(1.0, max(-1.0, cos))
    if 1 - cos * cos <= 1e-16:
        return (1 - t) * a + t * b
    theta = math.acos(cos)
    return (math.sin((1 - t) * theta) * a + math.sin(t * theta) * b) / math.sin(theta)


@pytest.fixture
def three_matrices():
    generator = torch.Generator().manual_seed(2)
    return [torch.randn(4, 3, generator=generator).double() for _ in range(3)]


def test_nuslerp_flat_rows_and_columns(three_matrices):
    a, b = (m.numpy() for m in three_matrices[:2])
    weights = [{"weight": 1.0}, {"weight": 3.0}]  # t = 3/4
    flat = run("nuslerp", three_matrices[:2], model_params=weights, dtype=torch.float64)
    assert flat.numpy() == pytest.approx(slerp_vectors(0.75, a.ravel(), b.ravel()).reshape(4, 3), rel=1e-12)
    rows = run("nuslerp", three_matrices[:2], model_params=weights, dtype=torch.float64, nuslerp_flatten=False)
    expected_rows = np.stack([slerp_vectors(0.75, a[i], b[i]) for i in range(4)])
    assert rows.numpy() == pytest.approx(expected_rows, rel=1e-12)
    columns = run(
        "nuslerp", three_matrices[:2], model_params=weights, dtype=torch.float64,
        nuslerp_flatten=False, nuslerp_row_wise=True,
    )
    expected_columns = np.stack([slerp_vectors(0.75, a[:, j], b[:, j]) for j in range(3)], axis=1)
    assert columns.numpy() == pytest.approx(expected_columns, rel=1e-12)


def test_nuslerp_with_a_base_slerps_the_task_vectors(three_matrices):
    base, x1, x2 = three_matrices
    params = [{}, {"weight": 2.0}, {"weight": 2.0}]
    result = run("nuslerp", [base, x1, x2], base_index=0, model_params=params, dtype=torch.float64)
    b = base.numpy()
    expected = b + slerp_vectors(0.5, (x1.numpy() - b).ravel(), (x2.numpy() - b).ravel()).reshape(4, 3)
    assert result.numpy() == pytest.approx(expected, rel=1e-12)


def test_nuslerp_zero_weight_sum_and_parallel_rows():
    parallel_rows = [[[1.0, 2.0], [1.0, 0.0]], [[2.0, 4.0], [0.0, 1.0]]]
    result = run(
        "nuslerp", parallel_rows, model_params=[{"weight": 1.0}, {"weight": -1.0}], dtype=torch.float64,
        nuslerp_flatten=False,
    )
    # |w1 + w2| < 1e-6 → t = 0.5. Row 0 is parallel → lerp; row 1 orthogonal → slerp.
    assert result[0].tolist() == [1.5, 3.0]
    assert result[1].tolist() == pytest.approx([SQRT_HALF, SQRT_HALF], rel=1e-12)


def test_nuslerp_needs_both_models_for_a_tensor():
    with pytest.raises(IncompatibleModelsError, match="only 1 of them"):
        run("nuslerp", [[1.0], [2.0]], base_index=0, model_params=[{"weight": 1.0}, {"weight": 1.0}])


# ---- multislerp -----------------------------------------------------------------------------------------


def multislerp_reference(xs: list[np.ndarray], weights: list[float], eps: float = 1e-8) -> np.ndarray:
    w = np.array(weights) / sum(weights)
    norms = [np.linalg.norm(x) for x in xs]
    units = [x / (n + eps) for x, n in zip(xs, norms)]
    mean = sum(wi * u for wi, u in zip(w, units))
    mean = mean / np.linalg.norm(mean)
    tangent = sum(wi * (u - np.dot(u, mean) * mean) for wi, u in zip(w, units))
    n = np.linalg.norm(tangent) + eps
    return (mean * math.cos(n) + tangent * math.sin(n) / n) * sum(wi * ni for wi, ni in zip(w, norms))


def test_multislerp_matches_the_reference_with_and_without_base():
    generator = torch.Generator().manual_seed(3)
    xs = [torch.randn(5, 4, generator=generator).double() for _ in range(4)]
    weights = [0.5, 1.0, 2.0]
    params = [{"weight": w} for w in weights]
    plain = run("multislerp", xs[1:], model_params=params, dtype=torch.float64)
    expected = multislerp_reference([x.numpy().ravel() for x in xs[1:]], weights).reshape(5, 4)
    assert plain.numpy() == pytest.approx(expected, rel=1e-10)
    with_base = run("multislerp", xs, base_index=0, model_params=[{}] + params, dtype=torch.float64)
    b = xs[0].numpy()
    deltas = [(x.numpy() - b).ravel() for x in xs[1:]]
    assert with_base.numpy() == pytest.approx(b + multislerp_reference(deltas, weights).reshape(5, 4), rel=1e-10)


def test_multislerp_single_input_is_returned_as_is():
    base, x = [1.0, 1.0], [3.0, -2.0]
    assert run("multislerp", [base, x], base_index=0, model_params=[{}, {"weight": 0.3}]).tolist() == x


def test_multislerp_cancelling_directions():
    # x and −x with equal weights: the mean direction vanishes. Two inputs: w0·x0 + w1·x1 (+ base).
    result = run("multislerp", [[0.5, 0.5], [1.5, 2.5], [-0.5, -1.5]], base_index=0,
                 model_params=[{}, {"weight": 1.0}, {"weight": 1.0}])  # fmt: skip
    assert result.tolist() == [0.5, 0.5]
    with pytest.raises(IncompatibleModelsError, match="cancel out"):
        run("multislerp", [[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]], model_params=[{"weight": 1.0}] * 4)


# ---- karcher --------------------------------------------------------------------------------------------


def karcher_reference(xs: list[np.ndarray], max_iter: int = 10, tol: float = 1e-5) -> np.ndarray:
    norms = [np.linalg.norm(x) for x in xs]
    valid = [(x / n) for x, n in zip(xs, norms) if n > tol]
    alpha = 1.0 / len(valid)
    mean = sum(alpha * u for u in valid)
    mean = mean / np.linalg.norm(mean)
    for _ in range(max_iter):
        tangent = np.zeros_like(mean)
        for u in valid:
            cos = min(1.0, max(-1.0, float(np.dot(mean, u))))
            theta = math.acos(cos)
            if theta < tol:
                continue
            tangent += alpha * theta / math.sin(theta) * (u - cos * mean)
        step = np.linalg.norm(tangent)
        if step < tol:
            break
        mean = math.cos(step) * mean + math.sin(step) * tangent / step
        mean = mean / np.linalg.norm(mean)
    return mean * (sum(norms) / len(xs))


def test_karcher_with_a_zero_norm_input_by_hand():
    # Directions (1, 0) and (0, 1) meet at 45°; the zero input counts only in the mean norm: (2 + 2 + 0) / 3.
    result = run("karcher", [[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    assert result.tolist() == pytest.approx([4 / 3 * SQRT_HALF] * 2, rel=1e-6)
    assert run("karcher", [[0.0, 0.0], [0.0, 0.0]]).tolist() == [0.0, 0.0]


def test_karcher_matches_the_reference_iteration():
    generator = torch.Generator().manual_seed(4)
    xs = [torch.randn(7, generator=generator).double() + 1.0 for _ in range(3)]
    result = run("karcher", xs, dtype=torch.float64)
    assert result.numpy() == pytest.approx(karcher_reference([x.numpy() for x in xs]), rel=1e-10)
    one_step = run("karcher", xs, dtype=torch.float64, max_iter=1)
    assert one_step.numpy() == pytest.approx(karcher_reference([x.numpy() for x in xs], max_iter=1), rel=1e-10)
