"""The merge loop: plan, then for each output tensor read → compute in float32 → cast → append to its shard.

Tensors that an elementwise method merges (or that are copied) go through the loop a block of rows at a time:
each input's rows of one block are read from its file, merged, cast and appended, so memory holds a few blocks
whatever the tensor's size. A method with a survey (TIES, Breadcrumbs, RAM+, SCE) streams the same way after it has
been shown every block of the tensor in a few passes (the blocks are read again from the files). Other methods need
whole tensors: those go through whole. The next piece is read ahead on a second thread while the current one is
computed, and the previous one written on a third: peak memory is a few pieces, never a model or a shard. The
output appears under its name only when complete.
"""

from __future__ import annotations

import math
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from guiapp.checkpoints.page_cache import PageCacheWarmer
from guiapp.checkpoints.sources import ModelReader, open_readers, read_headers
from guiapp.checkpoints.writing import (
    DEFAULT_SHARD_BYTES,
    PlannedTensor,
    ShardedWriter,
    StagedOutput,
    check_free_space,
    local_input_folders,
)
from guiapp.compute.devices import resolve_device, threads_restored, use_cpu_threads
from guiapp.compute.parallel import HelperThreads, RunEach, one_at_a_time
from guiapp.errors import IncompatibleModelsError, NonFiniteResultError, Remedy
from guiapp.facts.dtypes import dtype_name
from guiapp.hub.references import ModelRef
from guiapp.merging.methods.base import MergeContext, TensorSettings, TensorSurvey
from guiapp.merging.model_card import write_merge_metadata
from guiapp.merging.modules import build_modular_plan
from guiapp.merging.plan import (
    MergePlan,
    TensorInput,
    TensorTask,
    align_vocabulary,
    build_plan,
)
from guiapp.merging.recipe import Recipe
from guiapp.progress import Progress
from guiapp.system.memory import FREE_HEAP_BUDGET, release_free_memory
from guiapp.system.threads import ThreadPolicy, WorkKind

# Room for config, tokenizer and card files, and for the file system's own overhead.
_DISK_MARGIN_BYTES = 64 * 1024 * 1024


@dataclass
class MergeSettings:
    """How to run a recipe: where to write, on which device, with which seed and shard size."""

    output: Path
    device: str = "cpu"
    seed: int = 0
    shard_bytes: int = DEFAULT_SHARD_BYTES
    overwrite: bool = False
    # "float32": compute in float32 (float64 for float64 inputs) and cast once; "recipe": in the recipe's dtype,
    # as mergekit does (see plan.compute_dtype_of).
    compute_dtype: str = "float32"
    threads: ThreadPolicy = field(default_factory=ThreadPolicy)


@dataclass
class MergeOutcome:
    output: Path
    plan: MergePlan
    seconds: float
    tensor_stats: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        kept = [s["kept_fraction"] for s in self.tensor_stats if "kept_fraction" in s]
        return {
            "output": str(self.output),
            "method": self.plan.method.name,
            "tensors": len(self.plan.tasks),
            "output_bytes": self.plan.output_bytes,
            "seconds": round(self.seconds, 3),
            "mean_kept_fraction": sum(kept) / len(kept) if kept else None,
            "warnings": self.plan.warnings,
        }


def plan_merge(recipe: Recipe, progress: Progress | None = None, compute_as_recipe: bool = False) -> MergePlan:
    """Read every model's headers (no weights) and validate the recipe against them (`compute_as_recipe`: see
    build_plan).

    Raises RecipeError / IncompatibleModelsError / CheckpointError / HubError subclasses for what is wrong.
    """
    progress = progress or Progress()
    refs = recipe.model_refs()
    progress.start_stage("Reading model headers", total=len(refs))
    headers = {}
    for ref in refs:
        headers[ref] = read_headers(ref)
        progress.step(str(ref))
    donor_folder = tokenizer_folder(recipe.tokenizer_donor())  # a donor that cannot be had is reported now
    plan = (build_modular_plan(recipe, headers, compute_as_recipe) if recipe.modules else
            build_plan(recipe, headers, compute_as_recipe))
    settings = recipe.tokenizer
    if settings is not None and (settings.source == "union" or donor_folder or settings.pad_to_multiple_of):
        # The output's vocabulary size comes from tokenizers (small files, no weights): read them now, so the
        # plan's shapes, and so the estimate, are the ones the merge writes. Running aligns again, identically.
        align_vocabulary(plan, _vocabulary_folders(plan), donor_folder)
    for warning in plan.warnings:
        progress.warn(warning)
    return plan


def merge_inputs(recipe: Recipe) -> tuple[Path, ...]:
    """The local folders a merge reads (models, adapters, the tokenizer donor), which its output must keep clear of.

    Raises CheckpointError for a local path that does not exist.
    """
    donor = recipe.tokenizer_donor()
    return local_input_folders([*recipe.model_refs(), *([donor] if donor else [])])


def run_merge(
    recipe: Recipe,
    settings: MergeSettings,
    progress: Progress | None = None,
    before_start: Callable[[MergePlan], None] | None = None,
) -> MergeOutcome:
    """Merge `recipe` into `settings.output`.

    Everything that can be checked from headers is checked before any download or computation; `before_start`
    is then called with the plan (the jobs layer estimates the job there and may refuse it by raising). On
    failure or cancellation nothing is left at `settings.output` (an existing folder there is kept unless the
    merge completes with `overwrite`). Raises the MergesmithError subclasses of the problem found.
    """
    progress = progress or Progress()
    started = time.monotonic()
    # The thread policy's first reading of the machine's load spans a short wait (LoadMeter): taken while the job
    # plans and opens its inputs, so that the merge loop's first decision does not wait for it.
    measuring = threading.Thread(target=settings.threads.free_cores, name="mergesmith-load", daemon=True)
    measuring.start()
    try:
        device = resolve_device(settings.device)
        inputs = merge_inputs(recipe)
        with StagedOutput(settings.output, overwrite=settings.overwrite, inputs=inputs, kind="merge") as staged:
            plan = plan_merge(recipe, progress, compute_as_recipe=settings.compute_dtype == "recipe")
            if before_start is not None:
                before_start(plan)  # the estimate: it names every shortage (disk, RAM, VRAM) at once
            check_free_space(staged.path, plan.output_bytes + _DISK_MARGIN_BYTES)
            readers = open_readers([model.ref for model in plan.models], progress)
            try:
                donor_folder = tokenizer_folder(plan.tokenizer_donor)
                align_vocabulary(plan, [r.folder for r in readers], donor_folder)
                measuring.join()
                stats = _merge_tensors(plan, readers, staged.path, device, settings, progress)
                write_merge_metadata(staged.path, plan, [r.folder for r in readers], donor_folder)
            finally:
                for reader in readers:
                    reader.close()
            progress.check_cancelled()
            output = staged.commit(progress)
    finally:
        measuring.join()  # never left running after the job, whatever ended it
    elapsed = time.monotonic() - started
    progress.log(f"Done: {len(plan.tasks)} tensors written to {output} in {elapsed:.1f} s.")
    return MergeOutcome(output, plan, elapsed, stats)


def tokenizer_folder(donor: ModelRef | None) -> Path | None:
    """The folder of a tokenizer donor (a model that lends only its tokenizer; None for None): a local folder, or
    the tokenizer files of a Hub model fetched into the cache (no weights). Raises CheckpointError / HubError
    subclasses when it cannot be had."""
    if donor is None:
        return None
    from guiapp.hub.resolve import resolve_tokenizer  # noqa: PLC0415 - a local folder is returned as it is

    return resolve_tokenizer(donor)


def _vocabulary_folders(plan: MergePlan) -> list[Path]:
    """Each merged model's folder, or for a Hub model the cached folder of its tokenizer files alone (a model
    without tokenizer.json is given its folder anyway: the base's vocabulary stands in for it)."""
    from guiapp.hub.resolve import resolve_tokenizer  # noqa: PLC0415 - a local folder is returned as it is

    return [resolve_tokenizer(model.ref.base, required=False) for model in plan.models]


def _merge_tensors(
    plan: MergePlan,
    readers: list[ModelReader],
    folder: Path,
    device: torch.device,
    settings: MergeSettings,
    progress: Progress,
) -> list[dict[str, Any]]:
    planned = [PlannedTensor(t.name, t.shape, plan.out_tensor_dtype(t)) for t in plan.tasks]
    return merge_into(plan, readers, ShardedWriter(folder, planned, settings.shard_bytes), device, settings, progress)


class TensorSink(Protocol):
    """Where the merge loop puts each output tensor, or block of its rows: `write` it (rows from `row_start`),
    `close` once every tensor is written, `abort` when the merge stops before that."""

    def write(self, name: str, tensor: torch.Tensor, row_start: int) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


def merge_into(
    plan: MergePlan,
    readers: list[ModelReader],
    writer: TensorSink,
    device: torch.device,
    settings: MergeSettings,
    progress: Progress,
) -> list[dict[str, Any]]:
    """The merge loop: every tensor of `plan`, read from `readers`, merged and handed to `writer` (a shard file,
    or the lab's model in memory). Returns each tensor's statistics. On any exception `writer.abort()` is called and
    the exception goes on (NonFiniteResultError, IncompatibleModelsError, Cancelled...)."""
    progress.start_stage("Merging", total=len(plan.tasks), bytes_total=plan.input_bytes,
                         work_total=sum(_task_work(plan, task) for task in plan.tasks))
    stats: list[dict[str, Any]] = []
    pieces = _pieces(plan)
    task_index = {id(task): index for index, task in enumerate(plan.tasks)}
    # A tensor read in several passes is read from disk in the first only: its bytes are brought in while the
    # tensor before it is merged.
    read_in_passes = {id(piece.task) for piece in pieces if piece.counting}
    # Reading the next piece (file reads, dtype casts) and writing the previous one overlap the computation of
    # the current one; at most one piece waits on each side, so memory stays a few pieces.
    # Reading and writing are bound by memory and disk: one torch thread each.
    with ThreadPoolExecutor(1, "mergesmith-read", initializer=use_cpu_threads, initargs=(1,)) as reads, \
            ThreadPoolExecutor(1, "mergesmith-write", initializer=use_cpu_threads, initargs=(1,)) as writes, \
            HelperThreads(settings.threads.most) as helpers, threads_restored():
        pending_read: Future | None = reads.submit(_read_piece, plan, readers, pieces[0], device)
        pending_write: Future | None = None
        warmer = PageCacheWarmer([
            [(readers[item.model], item.tensor) for item in task.inputs] if id(task) in read_in_passes else []
            for task in plan.tasks
        ])
        try:
            for index, piece in enumerate(pieces):
                task = piece.task
                tensors = pending_read.result()
                pending_read = (
                    reads.submit(_read_piece, plan, readers, pieces[index + 1], device)
                    if index + 1 < len(pieces) else None
                )
                if index == 0 or pieces[index - 1].task is not task:
                    seconds, extra = 0.0, {}
                    warmer.reached(task_index[id(task)])
                if piece.survey is None:
                    use_cpu_threads(settings.threads.threads_for(_work_kind(plan, task)))
                else:
                    # A surveyed tensor's blocks: one torch thread per operation, its models counted at once on the
                    # free cores (guiapp/compute/parallel.py says why).
                    use_cpu_threads(1)
                    helpers.width = settings.threads.threads_for(WorkKind.DENSE)
                tick = time.perf_counter()
                if piece.counting:
                    _count_block(plan, piece, tensors, device, settings.seed, helpers.run_each)
                    seconds += time.perf_counter() - tick
                    if piece.block.stop == task.shape[0]:  # the end of a pass
                        piece.survey.end_pass()
                        if piece.survey.passes_left and not pieces[index + 1].counting:
                            # An unlucky sample asks for another pass: it goes before the merge pass, whose first
                            # block is being read ahead already and holds the same rows as the new pass's first.
                            pieces[index + 1 : index + 1] = _counting_pass(task, piece.survey, sampling=False)
                    continue
                if piece.rows is None:
                    result = _compute(plan, task, tensors, device, settings.seed, extra)
                else:
                    result = _merge_block(plan, task, tensors, device, settings.seed, extra, piece.survey,
                                          helpers.run_each)
                del tensors
                seconds += time.perf_counter() - tick
                if pending_write is not None:
                    pending_write.result()
                pending_write = writes.submit(writer.write, task.name, result, piece.rows.start if piece.rows else 0)
                del result
                if index + 1 == len(pieces) or pieces[index + 1].task is not task:
                    release_free_memory(above=FREE_HEAP_BUDGET)
                    threads = torch.get_num_threads() if piece.survey is None else helpers.width
                    stats.append({"tensor": task.name, "seconds": seconds, "threads": threads, **extra})
                    progress.step(task.name, nbytes=plan.task_input_bytes(task), work=_task_work(plan, task))
            if pending_write is not None:
                pending_write.result()
        except BaseException:
            for future in (pending_read, pending_write):
                if future is not None and not future.cancel():
                    future.exception()  # let it finish before the file is closed under it
            writer.abort()
            raise
        finally:
            warmer.close()
            release_free_memory()  # the blocks the heaps kept for reuse, now that none will come
    writer.close()
    return stats


# What a tensor costs besides its bytes (handing it between the reading, merging and writing threads, its
# statistics, returning freed memory), in bytes of a linear merge's input: 7–12 ms a tensor (a norm's whole time)
# where a linear merge read 2–3 MB (benchmarks/estimates.py, two busy cores). Counted, the bar and its time left
# no longer take the many small tensors of a small model as almost free.
TENSOR_WORK_BYTES = 2_000_000


def _task_work(plan: MergePlan, task: TensorTask) -> int:
    """What merging `task` costs, as the bar and its time left count it: its input bytes and a tensor's own cost."""
    return plan.task_input_bytes(task) + TENSOR_WORK_BYTES


def _work_kind(plan: MergePlan, task: TensorTask) -> WorkKind:
    # The other methods (TIES on a whole tensor too) compute far more per entry than they move: the free cores help.
    if plan.method.elementwise or task.copy or not task.floating:
        return WorkKind.ELEMENTWISE
    return WorkKind.DENSE


# Elementwise methods (and copies) merge blocks of this many entries, which stay in the CPU's cache through every
# step, and which are also what the loop reads and writes at a time.
BLOCK_ELEMENTS = 1 << 20


def merges_in_blocks(plan: MergePlan, task: TensorTask) -> bool:
    """Whether `task` is merged block by block (elementwise methods and copies of tensors larger than a block)."""
    return (plan.method.elementwise or task.copy) and task.floating and len(task.shape) > 0 \
        and math.prod(task.shape) > BLOCK_ELEMENTS


def tensor_survey(plan: MergePlan, task: TensorTask) -> TensorSurvey | None:
    """A fresh survey with which the plan's method merges `task` block by block, or None (it needs it whole)."""
    if plan.method.survey is None or task.copy or not task.floating:
        return None
    settings = TensorSettings(task.model_params, task.params, task.base_index, math.prod(task.shape), plan.compute_dtype)
    return plan.method.survey(settings)


def streams_in_blocks(plan: MergePlan, task: TensorTask) -> bool:
    """Whether `task` is read, merged and written block by block: a tensor larger than a block that is copied or
    merged by an elementwise method or one with a survey, from inputs as stored (inputs laid out in another
    vocabulary or changed by an adapter exist whole only, so they are read whole)."""
    large = task.floating and len(task.shape) > 0 and math.prod(task.shape) > BLOCK_ELEMENTS
    return large and (merges_in_blocks(plan, task) or tensor_survey(plan, task) is not None) \
        and task.vocabulary is None and not any(plan.models[item.model].ref.adapter for item in task.inputs)


@dataclass(frozen=True)
class _Piece:
    """What the loop reads and computes in one step: a whole tensor, or the rows `rows` of it, either merged and
    written, or (`counting`) shown to the tensor's `survey` in one of its passes. In the pass that draws a sample,
    `rows` are a part of the block `sampled_from`, whose rows they stand for."""

    task: TensorTask
    rows: range | None = None
    survey: TensorSurvey | None = None
    counting: bool = False
    sampled_from: range | None = None

    @property
    def block(self) -> range | None:
        """The rows of the block this piece stands for: its own rows, or those it samples."""
        return self.rows if self.sampled_from is None else self.sampled_from


def _pieces(plan: MergePlan) -> list[_Piece]:
    pieces = []
    for task in plan.tasks:
        if streams_in_blocks(plan, task):
            survey = tensor_survey(plan, task)
            for number in range(survey.passes_left if survey else 0):
                pieces.extend(_counting_pass(task, survey, sampling=number == 0 and survey.samples_next_pass))
            pieces.extend(_Piece(task, rows, survey) for rows in _row_blocks(task.shape))
        else:
            pieces.append(_Piece(task))
    return pieces


def _counting_pass(task: TensorTask, survey: TensorSurvey, sampling: bool) -> list[_Piece]:
    """The pieces of one pass of `survey` over `task`'s blocks; with `sampling`, the pass that draws its sample."""
    blocks = _row_blocks(task.shape)
    if not sampling:
        return [_Piece(task, rows, survey, counting=True) for rows in blocks]
    # The sample is drawn from a part of each block's rows: the pass reads an eighth of the tensor, not all of it.
    return [_Piece(task, _sampled_rows(rows, index), survey, counting=True, sampled_from=rows)
            for index, rows in enumerate(blocks)]


# The pass that draws a sample reads this fraction of each block's rows (at least one row): the sample is a 64th of
# the entries, so reading every row only to skip most of them made that pass as slow as reading the model.
SAMPLED_ROWS_FRACTION = 8
_SCRAMBLE = 2654435761  # Knuth's multiplicative hash: consecutive blocks start their runs far apart


def _sampled_rows(block: range, index: int) -> range:
    """The rows of `block` (the `index`-th of its tensor) that the sample is drawn from: a run of an eighth of them,
    placed differently in each block (a fixed scramble of the index, so a merge reads the same rows every time)."""
    length = -(-len(block) // SAMPLED_ROWS_FRACTION)
    start = block.start + (index * _SCRAMBLE) % (len(block) - length + 1)
    return range(start, start + length)


def _row_blocks(shape: tuple[int, ...]) -> list[range]:
    """The rows of each block of a tensor of `shape`: whole rows, about BLOCK_ELEMENTS entries in all."""
    block_rows = max(1, BLOCK_ELEMENTS // max(1, math.prod(shape[1:])))
    return [range(start, min(start + block_rows, shape[0])) for start in range(0, shape[0], block_rows)]


def _read_piece(plan: MergePlan, readers: list[ModelReader], piece: _Piece, device: torch.device) -> list[torch.Tensor]:
    if piece.rows is None:
        return _read_inputs(plan, readers, piece.task, device)
    return [_read_rows(readers, piece.task, item, piece.rows) for item in piece.task.inputs]


def _read_rows(readers: list[ModelReader], task: TensorTask, item: TensorInput, rows: range) -> torch.Tensor:
    """The input `item`'s rows `rows` of `task`, as stored: rows past those it has (a smaller vocabulary) come from
    the tokenizer source's tensor, as `_read_inputs` pads them."""
    own = rows if item.rows is None else range(rows.start, max(rows.start, min(rows.stop, item.rows)))
    tensor = readers[item.model].read_rows(item.tensor, own)
    if item.pad_from is not None and rows.stop > own.stop:
        model, name = item.pad_from
        padding = readers[model].read_rows(name, range(own.stop, rows.stop))
        tensor = torch.cat([tensor, padding.to(tensor.dtype)])
    return tensor


def _read_inputs(plan: MergePlan, readers: list[ModelReader], task: TensorTask, device: torch.device) -> list[torch.Tensor]:
    if task.vocabulary is not None:
        # Every input is laid out in the output vocabulary first; a lacking row may come from another input.
        stored = {item.model: _to_compute(plan, readers[item.model].read(item.tensor), device) for item in task.inputs}
        aligned = task.vocabulary.align(stored)
        return [aligned[item.model] for item in task.inputs]
    # Blocks are converted one at a time, and inputs merged as stored not at all.
    convert = task.floating and not merges_in_blocks(plan, task) and not merges_as_stored(plan, task)
    tensors = []
    for item in task.inputs:
        tensor = readers[item.model].read(item.tensor)
        if item.rows is not None:
            tensor = tensor[: item.rows]
            if item.pad_from is not None:
                model, name = item.pad_from
                padding = readers[model].read(name)[item.rows : task.shape[0]]
                tensor = torch.cat([tensor, padding.to(tensor.dtype)])
        if convert:
            tensor = _to_compute(plan, tensor, device)
        tensors.append(tensor)
    return tensors


def _to_compute(plan: MergePlan, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    if plan.read_dtype is not None:
        tensor = tensor.to(plan.read_dtype)
    return tensor.to(device=device, dtype=plan.compute_dtype)


def _compute(
    plan: MergePlan, task: TensorTask, tensors: list[torch.Tensor], device: torch.device, seed: int,
    extra: dict[str, Any],
) -> torch.Tensor:
    """The whole output tensor of `task` from its whole inputs, in the output dtype, on the CPU (the method's
    statistics go into `extra`). Raises IncompatibleModelsError / NonFiniteResultError."""
    if not task.floating:
        if any(not torch.equal(tensors[0], other) for other in tensors[1:]):
            labels = ", ".join(plan.models[i.model].label for i in task.inputs)
            raise IncompatibleModelsError(
                f"{task.name} holds integers (not weights) and differs between {labels}, so it cannot be merged.",
                hint="These models are not compatible; check that they share an architecture.",
            )
        return tensors[0].cpu()
    if merges_in_blocks(plan, task):
        stored = torch.empty(task.shape, dtype=plan.out_dtype)
        for rows in _row_blocks(task.shape):
            stored[rows.start : rows.stop] = _merge_block(
                plan, task, [t[rows.start : rows.stop] for t in tensors], device, seed, extra)
        return stored
    if merges_as_stored(plan, task):
        return _merge_block(plan, task, tensors, device, seed, extra)  # read as stored, like one block of all rows
    result = tensors[0] if task.copy else _merge_one(plan, task, tensors, device, seed, extra)
    stored = result.to(plan.out_dtype)
    if not _all_finite(stored):
        raise _non_finite_error(plan, task, tensors, computed_finite=_all_finite(result))
    return stored.cpu()


def _count_block(
    plan: MergePlan, piece: _Piece, tensors: list[torch.Tensor], device: torch.device, seed: int,
    run_each: RunEach,
) -> None:
    """Show one block (its inputs' rows as stored) to the survey of its tensor: the entries it samples, when it
    samples, converted alone (the pass that draws a sample reads an eighth of each block's rows and looks at a 64th
    of its entries). The survey may spread independent calls over `run_each` (MergeContext.run_each)."""
    row_numel = math.prod(piece.task.shape[1:])
    positions = piece.survey.sample_positions(len(piece.rows) * row_numel, len(piece.block) * row_numel)
    if positions is not None:
        tensors = [tensor.reshape(-1)[positions.to(tensor.device)] for tensor in tensors]
    inputs = [_to_compute(plan, tensor, device) for tensor in tensors]
    piece.survey.count(_context(plan, piece.task, inputs, device, seed, run_each))


def _merge_block(
    plan: MergePlan, task: TensorTask, tensors: list[torch.Tensor], device: torch.device, seed: int,
    extra: dict[str, Any], survey: TensorSurvey | None = None, run_each: RunEach = one_at_a_time,
) -> torch.Tensor:
    """One block of rows of `task`'s output from its inputs' rows (as stored), in the output dtype, on the CPU;
    merged by the `survey` of the whole tensor when its method has one, which may spread independent calls over
    `run_each`.

    Raises NonFiniteResultError when the block comes out NaN or infinite: the block depends on these rows (and
    on the survey, which only ranks them), so they tell an input's NaN from an overflow of the cast.
    """
    if survey is None and merges_as_stored(plan, task):
        stored = _merge_as_stored(plan, task, tensors, device, seed)
        if stored is not None:
            return stored
    if task.copy and _stored_as_output(plan, tensors[0].dtype):
        # A copy stored in the output's dtype (passthrough, a tensor only one model has): converted to the compute
        # dtype and back it would come out the same, so it is written as read.
        inputs = tensors
        result = tensors[0]
    else:
        inputs = [_to_compute(plan, tensor, device) for tensor in tensors]
        result = inputs[0] if task.copy else _merge_one(plan, task, inputs, device, seed, extra, survey, run_each)
    stored = result.to(plan.out_dtype)
    if not _all_finite(stored):
        raise _non_finite_error(plan, task, inputs, computed_finite=_all_finite(result))
    return stored.cpu()


def merges_as_stored(plan: MergePlan, task: TensorTask) -> bool:
    """Whether `task`'s inputs go to its method's `merge_stored` as they are stored: the method has one, every input
    is read in the output's dtype (as stored, or as its adapter yields it), a narrower one than float32, and the
    recipe asks for the usual float32 arithmetic (inputs stored in float32 need no conversion: merged as they are,
    they skip the copy into chunks)."""
    return (
        plan.method.merge_stored is not None and task.floating and not task.copy and task.vocabulary is None
        and plan.compute_dtype == torch.float32 and plan.out_dtype != torch.float32
        and all(_stored_as_output(plan, plan.models[i.model].read_dtype(i.tensor)) for i in task.inputs)
    )


def _stored_as_output(plan: MergePlan, dtype: torch.dtype) -> bool:
    """Whether an input stored in `dtype` is read as the output stores it: the same dtype, and the recipe's `dtype`
    (if any) is that one too."""
    return dtype == plan.out_dtype and plan.read_dtype in (None, plan.out_dtype)


def _merge_as_stored(
    plan: MergePlan, task: TensorTask, tensors: list[torch.Tensor], device: torch.device, seed: int,
) -> torch.Tensor | None:
    """The method's `merge_stored` of `tensors` (as stored), on the CPU; None when its result is not finite (the
    float32 path then tells the user why)."""
    stored = plan.method.merge_stored(_context(plan, task, [t.to(device) for t in tensors], device, seed))
    return stored.cpu() if _all_finite(stored) else None


def _merge_one(
    plan: MergePlan, task: TensorTask, tensors: list[torch.Tensor], device: torch.device, seed: int,
    stats: dict[str, Any], survey: TensorSurvey | None = None, run_each: RunEach = one_at_a_time,
) -> torch.Tensor:
    context = _context(plan, task, tensors, device, seed, run_each)
    result = survey.merge(context) if survey else plan.method.merge(context)
    stats.update(context.stats)
    return result


def _context(
    plan: MergePlan, task: TensorTask, tensors: list[torch.Tensor], device: torch.device, seed: int,
    run_each: RunEach = one_at_a_time,
) -> MergeContext:
    generator = torch.Generator(device=device)
    generator.manual_seed(seed * 1_000_003 + zlib.crc32(task.name.encode()))
    return MergeContext(
        tensor_name=task.name,
        tensors=tensors,
        base_index=task.base_index,
        model_params=task.model_params,
        params=task.params,
        model_names=[plan.models[i.model].label for i in task.inputs],
        generator=generator,
        run_each=run_each,
    )


def _all_finite(tensor: torch.Tensor) -> bool:
    # NaN and inf propagate into the sum, which costs one pass and no allocation (asking sum for another dtype
    # would convert the whole tensor first); only a sum that overflowed although every element is finite needs
    # the exact, slower check.
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def _non_finite_error(
    plan: MergePlan, task: TensorTask, tensors: list[torch.Tensor], computed_finite: bool
) -> NonFiniteResultError:
    broken = [plan.models[i.model].label for i, t in zip(task.inputs, tensors) if not _all_finite(t)]
    dtype = dtype_name(plan.out_dtype)
    retry = None
    if broken:
        cause = f"the input {', '.join(broken)} already contains NaN or infinity in this tensor"
        hint = "That model file is damaged or was saved after a training run that diverged; use another copy."
    elif computed_finite:
        cause = f"the merged values are too large to be stored as {dtype}"
        hint = "Store the result as bfloat16 or float32 instead (out_dtype)."
        retry = Remedy("out_dtype", "bfloat16", "in bfloat16")
    else:
        cause = "the computation overflowed"
        hint = "Check the weights and lambda for extreme values."
    return NonFiniteResultError(
        f"{task.name} came out as NaN or infinity: {cause}. Nothing was written.",
        hint=hint,
        remedy=retry,
    )


def working_set(plan: MergePlan) -> int:
    """Peak private bytes this loop adds while merging `plan`: one piece's inputs (a whole tensor, or a block of
    rows of a tensor it streams) in their buffers or converted to the compute dtype, the method's temporaries
    (its declared `working_copies`) and the output cast, plus the next piece's inputs read ahead and the previous
    piece's output being written. The decisions are the loop's own (`streams_in_blocks`, `merges_in_blocks`,
    `merges_as_stored`)."""
    compute_size = plan.compute_dtype.itemsize
    copies = plan.method.working_copies

    def whole_inputs(task, as_stored: bool) -> int:
        """The inputs of a task read whole, as the merge holds them: each read into its own buffer and, for a
        floating tensor not merged `as_stored`, converted to the compute dtype (the buffer read is then freed)."""
        total = 0
        for item in task.inputs:
            info = plan.models[item.model].tensors[item.tensor]
            converted = task.floating and not as_stored and (
                info.dtype != plan.compute_dtype or item.rows is not None
                or plan.read_dtype not in (None, plan.compute_dtype))
            total += math.prod(task.shape) * compute_size if converted else info.nbytes
        return total

    def piece(task) -> tuple[int, int, int]:
        """(inputs read, working bytes while it is computed, output written) of one piece of `task`."""
        numel = math.prod(task.shape)
        out_size = plan.out_tensor_dtype(task).itemsize
        streamed = streams_in_blocks(plan, task)
        # Inputs merged as stored are not converted, and the method's float32 copies stay a few cache-sized chunks.
        as_stored = merges_as_stored(plan, task)
        if not (streamed or merges_in_blocks(plan, task)):
            method = 0 if task.copy or not task.floating or as_stored else \
                int(copies.for_inputs(len(task.inputs)) * numel * compute_size)
            return whole_inputs(task, as_stored), method + numel * out_size, numel * out_size
        # Each input's block is converted to the compute dtype besides the method's own copies.
        block = len(_row_blocks(task.shape)[0]) * math.prod(task.shape[1:])
        block_working = 0 if as_stored else \
            int((copies.for_inputs(len(task.inputs)) + len(task.inputs)) * block * compute_size)
        if streamed:
            stored = sum(plan.models[i.model].tensors[i.tensor].dtype.itemsize for i in task.inputs)
            return block * stored, block_working + block * out_size, block * out_size
        # Read whole (positional reads into private buffers), merged in blocks into the whole output.
        return plan.task_input_bytes(task), block_working + numel * out_size, numel * out_size

    pieces = [piece(task) for task in plan.tasks]
    peak = 0
    for index, (read, working, written) in enumerate(pieces):
        streamed = streams_in_blocks(plan, plan.tasks[index])
        # Read ahead: the next piece, of this tensor or the next; written behind: the previous one, likewise.
        ahead = max(read if streamed else 0, pieces[index + 1][0] if index + 1 < len(pieces) else 0)
        behind = max(written if streamed else 0, pieces[index - 1][2] if index > 0 else 0)
        peak = max(peak, read + working + ahead + behind)
    return peak
