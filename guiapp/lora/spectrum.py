"""What a LoRA rank buys, before extracting: the singular values of (fine-tune − base) for a sample of modules and
the fraction of each update's energy (‖Δ‖²_F) that a LoRA of rank r keeps. The window draws these curves so the
user picks a rank on them.

A curve to choose a rank on needs the spectrum's shape, not a decomposition: each update is sketched (a
randomized range finder with one power iteration, Halko, Martinsson & Tropp 2011) and only the energies of its
leading directions are computed, from the small Gram matrix of the sketch, never the singular vectors. Decomposing
the sample with the extraction's solver at the preview's rank took longer than the extraction itself; the sketch
takes a fraction of it (benchmarks/estimates.py) and keeps the curve within a few hundredths of the exact one
(tests/lora/test_spectrum.py). The tensors come from the project's one reader (`checkpoint.open_checkpoint`), and
the sample is spread over the layers and the kinds of module (attention, MLP) so a few matrices stand for the
whole model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from guiapp.checkpoints.reading import Checkpoint, TensorInfo, open_checkpoint
from guiapp.checkpoints.tensor_roles import TensorRole, tensor_place
from guiapp.compute.devices import threads_restored, use_cpu_threads
from guiapp.errors import CheckpointError, IncompatibleModelsError, JobCancelled, OfflineError
from guiapp.hub.references import ModelRef
from guiapp.lora.lowrank import compute_dtype_for
from guiapp.system.threads import LoadMeter, ThreadPolicy, WorkKind

SAMPLE_MODULES = 8
# A model with few matrices gets fewer samples (one in this many of its matrices, at least MIN_SAMPLE_MODULES): a
# sketch costs about one and a half times a rank-16 decomposition of the same matrix, so eight of a 4-layer
# model's 28 matrices took half as long as extracting it.
MATRICES_PER_SAMPLE = 8
MIN_SAMPLE_MODULES = 3
# The curve goes this far (or to the matrix's full rank when smaller): ranks above it are rarely worth their size,
# and the sketch's cost grows with it (at 256 the preview of a 660 MB pair took a third of its extraction).
PREVIEW_MAX_RANK = 128
# One power iteration and this many extra directions keep the curve within 0.02 of the exact one at every rank for
# an update with 30 % of its energy in full-rank noise (none: 0.07 at the last rank); the extraction makes 3.
PREVIEW_POWER_ITERATIONS = 1
PREVIEW_OVERSAMPLE = 32
# Below this much sketching (rows × columns × sketch width, summed over the sample: a 4-layer, 512-wide model's is
# 0.35 G) the preview takes a few tens of milliseconds on one core: a second thread gains nothing there, and the
# load reading that decides on it would sleep a third of the preview away.
ONE_THREAD_SKETCH_WORK = 500_000_000


@dataclass(frozen=True)
class ModuleSpectrum:
    """One module's update seen through its singular values.

    `singular_values` are the leading ones, descending; `retained[r - 1]` is the fraction of ‖Δ‖²_F a LoRA of rank
    r keeps (1.0 everywhere for an update that is zero).
    """

    module: str
    shape: tuple[int, int]
    singular_values: tuple[float, ...]
    retained: tuple[float, ...]

    def retained_at(self, rank: int) -> float:
        """The fraction kept at `rank` (the last known value past the end of the curve)."""
        if not self.retained:
            return 1.0
        return self.retained[max(1, min(rank, len(self.retained))) - 1]

    def rank_for(self, fraction: float) -> int | None:
        """The smallest rank keeping at least `fraction` of the energy, or None when the curve never gets there."""
        for rank, kept in enumerate(self.retained, start=1):
            if kept >= fraction * (1 - 1e-9):
                return rank
        return None


def update_spectrum(module: str, delta: torch.Tensor, max_rank: int = PREVIEW_MAX_RANK, *, seed: int = 0) -> ModuleSpectrum:
    """The spectrum of the 2-D update `delta` up to rank `max_rank` (capped by the matrix's own rank), sketched
    (`sketched_energies`).

    Half-precision input is sketched in float32. Raises ValueError for a tensor that is not 2-D or holds NaN or
    infinity (the caller names the module).
    """
    if delta.ndim != 2:
        raise ValueError(f"expected a matrix, got a tensor of shape {tuple(delta.shape)}")
    matrix = delta.to(compute_dtype_for(delta.dtype))
    total = float(torch.linalg.vector_norm(matrix, dtype=torch.float64)) ** 2
    if not math.isfinite(total):
        raise ValueError("the update contains NaN or infinity")
    shape = (int(matrix.shape[0]), int(matrix.shape[1]))
    if total == 0.0:
        return ModuleSpectrum(module, shape, (0.0,), (1.0,))
    energies = sketched_energies(matrix, min(max_rank, min(shape)), seed=seed)
    retained = torch.clamp(torch.cumsum(energies, 0) / total, max=1.0)
    return ModuleSpectrum(module, shape, tuple(energies.sqrt().tolist()), tuple(retained.tolist()))


def sketched_energies(matrix: torch.Tensor, rank: int, *, power_iterations: int = PREVIEW_POWER_ITERATIONS,
                      oversample: int = PREVIEW_OVERSAMPLE, seed: int = 0) -> torch.Tensor:
    """The `rank` largest squared singular values of the float32/float64 `matrix` (descending, float64 on the
    CPU), estimated from a sketch of its range: never above the true ones, and exact when the matrix's rank is
    within the sketch. A matrix the sketch would cover whole gets its exact values."""
    if matrix.shape[0] < matrix.shape[1]:
        matrix = matrix.T  # the Gram matrix below is sketch × sketch either way; the range is the longer side's
    smallest = int(matrix.shape[1])
    sketch = min(smallest, rank + oversample)
    if sketch >= smallest:
        values = torch.linalg.svdvals(matrix).double().cpu().square()
        return values[:rank]
    generator = torch.Generator(device=matrix.device).manual_seed(seed)
    range_ = matrix @ torch.randn(smallest, sketch, generator=generator, device=matrix.device, dtype=matrix.dtype)
    for _ in range(power_iterations):
        # Orthonormalised before each product, so the small directions keep their digits.
        range_ = matrix @ (matrix.T @ torch.linalg.qr(range_).Q)
    projected = torch.linalg.qr(range_).Q.T @ matrix  # sketch × columns: the matrix seen from its range
    # Its squared singular values are the eigenvalues of its small Gram matrix, in float64: no SVD is needed.
    gram = (projected @ projected.T).double().cpu()
    return torch.linalg.eigvalsh(gram).flip(0).clamp(min=0.0)[:rank]


def sample_modules(tensors: dict[str, TensorInfo], count: int = SAMPLE_MODULES) -> list[str]:
    """Up to `count` module names (without `.weight`) whose 2-D weights an extraction would decompose, spread
    evenly over the layers and, within them, over the kinds of module. Embeddings and output heads are left out
    (they are saved whole by default); a model without numbered layers gives its other 2-D weights."""
    candidates = [name for name, info in tensors.items()
                  if name.endswith(".weight") and len(info.shape) == 2 and info.dtype.is_floating_point]
    places = {name: tensor_place(name) for name in candidates}
    layered = [name for name in candidates if places[name].role is TensorRole.LAYER]
    if layered:
        layered.sort(key=lambda name: (places[name].layer.index, places[name].layer.suffix))
        chosen = layered
    else:
        chosen = sorted(name for name in candidates if places[name].role is TensorRole.OTHER)
    if len(chosen) > count:
        # Evenly spaced over the (layer, kind) order: the first and last layers, and the kinds in between.
        step = (len(chosen) - 1) / max(1, count - 1)
        chosen = [chosen[round(i * step)] for i in range(count)]
    return [name.removesuffix(".weight") for name in chosen]


def preview_sample_size(matrices: int) -> int:
    """How many of a model's `matrices` (2-D weights an extraction decomposes) the preview samples."""
    return min(SAMPLE_MODULES, matrices, max(MIN_SAMPLE_MODULES, matrices // MATRICES_PER_SAMPLE))


def preview_spectra(
    base: str,
    model: str,
    count: int | None = None,
    max_rank: int = PREVIEW_MAX_RANK,
    cancelled: Callable[[], bool] | None = None,
    on_module: Callable[[int, int], None] | None = None,
) -> list[ModuleSpectrum]:
    """The spectra of the updates of a sample of modules from `base` to its fine-tune `model` (references as the
    LoRA form takes them). Only models on this computer are read: nothing is downloaded for a preview. `count`
    modules are sampled (None: `preview_sample_size`). `on_module(done, total)` is called as each module starts
    (done = 0, 1, …) and once all are done.

    Raises OfflineError naming the model when a Hub model is not downloaded, CheckpointError for an unreadable
    model, IncompatibleModelsError when the sampled modules differ in shape or are missing from one model,
    JobCancelled when `cancelled()` becomes true between modules (or between the reading and the sketch of one).
    """
    # The cores other programs leave free: on a busy machine two threads fighting for one core took 7 times as long
    # as one. Read over at least a fiftieth of a second (the usual tenth was a third of a small model's preview),
    # counted from here: the reading of the first module fills it.
    meter = LoadMeter(0.02)
    meter.begin()
    refs = [ModelRef.parse(base), ModelRef.parse(model)]
    folders = [_downloaded_folder(ref) for ref in refs]

    def check_stop() -> None:
        if cancelled is not None and cancelled():
            raise JobCancelled("The rank preview was stopped.")

    with open_checkpoint(folders[0]) as base_checkpoint, open_checkpoint(folders[1]) as tuned_checkpoint, \
            threads_restored():
        spectra = []
        if count is None:
            count = preview_sample_size(len(sample_modules(tuned_checkpoint.tensors, len(tuned_checkpoint.tensors))))
        modules = sample_modules(tuned_checkpoint.tensors, count)
        for done, module in enumerate(modules):
            check_stop()
            if on_module is not None:
                on_module(done, len(modules))
            delta = _update(base_checkpoint, tuned_checkpoint, f"{module}.weight", refs)
            if done == 0:
                small = _sketch_work(tuned_checkpoint, modules, max_rank) < ONE_THREAD_SKETCH_WORK
                use_cpu_threads(1 if small else
                                ThreadPolicy(busy_elsewhere=meter.busy_elsewhere).threads_for(WorkKind.DENSE))
            check_stop()
            try:
                spectra.append(update_spectrum(module, delta, max_rank))
            except ValueError as error:
                raise CheckpointError(f"{module} of {refs[1]} cannot be previewed: {error}.",
                                      hint="The model file may be damaged; download it again.") from None
        if on_module is not None:
            on_module(len(modules), len(modules))
        return spectra


def _sketch_work(checkpoint: Checkpoint, modules: list[str], max_rank: int) -> int:
    """Rows × columns × sketch width of each sampled module's sketch, summed (`ONE_THREAD_SKETCH_WORK`)."""
    work = 0
    for module in modules:
        rows, columns = checkpoint.tensors[f"{module}.weight"].shape[:2]
        work += rows * columns * (min(max_rank, rows, columns) + PREVIEW_OVERSAMPLE)
    return work


def _downloaded_folder(ref: ModelRef) -> Path:
    folder = ref.existing_folder()
    if folder is not None:
        return folder
    from guiapp.hub.resolve import resolve_model  # noqa: PLC0415 - the Hub client only for Hub references

    try:
        return resolve_model(ref, offline=True)
    except OfflineError as error:
        raise OfflineError(f"{ref} is not downloaded yet, so its changes cannot be previewed.",
                           hint="Download it (Models › Download), or extract the adapter: the extraction "
                           "downloads it first.") from error


def _update(base: Checkpoint, tuned: Checkpoint, name: str, refs: list[ModelRef]) -> torch.Tensor:
    if name not in base.tensors:
        raise IncompatibleModelsError(f"{refs[0]} has no {name}, which {refs[1]} has.",
                                      hint="Choose the base model the fine-tune was made from.")
    if base.tensors[name].shape != tuned.tensors[name].shape:
        raise IncompatibleModelsError(
            f"{name} has shape {list(base.tensors[name].shape)} in {refs[0]} but {list(tuned.tensors[name].shape)} "
            f"in {refs[1]}.", hint="Choose the base model the fine-tune was made from.")
    # Out of place in float32: a float32 tensor read from a file may be the file's buffer itself.
    return tuned.read(name).to(torch.float32) - base.read(name).to(torch.float32)
