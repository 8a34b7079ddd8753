"""Extracting a PEFT LoRA adapter from a fine-tune and its base, module by module.

For each module `Δ = W_ft − W_base` is computed in float32 (float64 if asked) on the chosen device and factored
by `lowrank.decompose`; unchanged modules are skipped and counted. What cannot be a LoRA is never dropped
silently: changed norms, other 1-D tensors and conv kernels go whole into `modules_to_save`; a changed bias of a
LoRA module rides along as PEFT's `lora_bias` (`lora_B.bias`), except next to embedding LoRAs (PEFT cannot
combine the two), where the module is saved whole. Embeddings and the output head follow `embeddings`:
saved whole (default), decomposed, or skipped (and reported).

Every guard runs on headers and configs before any tensor is read; the adapter folder is written into a
staging folder and appears only when complete.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from guiapp import __version__
from guiapp.checkpoints.peft_format import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    CLASSIFIER_HEADS,
    EMBEDDING_A,
    EMBEDDING_B,
    LORA_A,
    LORA_B,
    LORA_B_BIAS,
    PEFT_PREFIX,
    is_embedding,
    is_output_head,
    short_name,
    split_module,
    task_type_for,
)
from guiapp.checkpoints.reading import Checkpoint, TensorInfo, dtype_from_name
from guiapp.checkpoints.sources import ModelHeaders, ModelReader, open_readers, read_headers
from guiapp.checkpoints.writing import PlannedTensor, ShardedWriter, StagedOutput, check_free_space, local_input_folders
from guiapp.compute.devices import resolve_device, threads_restored, use_cpu_threads
from guiapp.errors import IncompatibleModelsError, NonFiniteResultError, SettingsError
from guiapp.facts.choices import EMBEDDING_POLICIES, SOLVERS, EmbeddingPolicy, Solver
from guiapp.facts.dtypes import COMPUTE, dtype_name
from guiapp.facts.wording import for_window, say
from guiapp.hub.references import ModelRef
from guiapp.lora.lowrank import RankRule, decompose, module_work, relative_error
from guiapp.merging.compatibility import CompatibilityProblem, ModelFacts, compare_models
from guiapp.progress import Progress
from guiapp.system.bounded import BoundedPattern
from guiapp.system.threads import ThreadPolicy, WorkKind

# ‖Δ‖_F at or below this fraction of ‖W_base‖_F counts as unchanged (rounding from a dtype round trip).
UNCHANGED_TOLERANCE = 1e-6
# Buffers some checkpoints carry that are not weights and may legitimately differ or be absent.
_BUFFER_SUFFIXES = ("inv_freq", "position_ids", ".masked_bias")
# Tensors that are only compared, never decomposed, are read in blocks of about this many elements.
_COMPARE_BLOCK = 1 << 24
# The output head of causal LMs whose head is tied to the input embedding.
TIED_HEAD = "lm_head"
PEFT_TIED_EMBEDDINGS = ("embed_tokens",)
# transformers' Conv1D stores Linear weights transposed (in × out); PEFT expects fan_in_fan_out for them.
_TRANSPOSED_LINEAR_MODELS = ("gpt2",)


@dataclass(frozen=True)
class ExtractionSettings:
    """What `mergesmith extract-lora` and the window's Extract LoRA form ask for.

    `dtype` is the adapter's storage dtype (None: the fine-tune's); `compute_dtype` float32 or float64;
    `include`/`exclude` are regular expressions searched in module names; `threads` decides how many CPU threads
    the decompositions use (differences and casts use one).
    """

    base: str
    model: str
    out: Path
    rule: RankRule = RankRule()
    solver: Solver = "randomized"
    include: str | None = None
    exclude: str | None = None
    embeddings: EmbeddingPolicy = "save"
    dtype: str | None = None
    device: str = "cpu"
    compute_dtype: str = "float32"
    overwrite: bool = False
    threads: ThreadPolicy = field(default_factory=ThreadPolicy, compare=False)


@dataclass
class ModuleReport:
    """One module of the adapter: how it was stored and, for LoRA modules, how well."""

    module: str
    kind: str  # "lora", "embedding_lora", "bias_only" (lora_bias with zero factors) or "saved"
    shape: list[int]
    rank: int | None = None
    retained_energy: float | None = None
    relative_error: float | None = None
    reason: str | None = None


@dataclass
class _Found:
    """What the comparison found, held until the adapter is written (factors are small; saved tensors are
    re-read from the memory-mapped fine-tune when written)."""

    factors: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    bias_deltas: dict[str, torch.Tensor] = field(default_factory=dict)
    saved: dict[str, list[str]] = field(default_factory=dict)  # module -> fine-tune tensor names
    reports: dict[str, ModuleReport] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    tied_embedding: str | None = None  # the input embedding, when the adapter holds it and the head is tied to it


def extract_lora(settings: ExtractionSettings, progress: Progress | None = None) -> dict[str, Any]:
    """Extract the adapter `settings` describe into `settings.out` and return a summary of it.

    Raises, before reading any tensor: SettingsError for invalid settings, DeviceError for a missing device,
    CheckpointError for unreadable models, IncompatibleModelsError for models that are not a base and its
    fine-tune (other architecture, other tensors or shapes, another vocabulary), OutputError for an unusable
    output folder. While running: IncompatibleModelsError "the two models are identical" when nothing changed,
    NonFiniteResultError for NaN/infinity in a model, InsufficientResourcesError when the disk is full,
    JobCancelled. Nothing is left at `settings.out` unless the job succeeds.
    """
    progress = progress or Progress()
    started = time.monotonic()
    include, exclude, compute, dtype = _validate(settings)
    device = resolve_device(settings.device)
    progress.start_stage("Checking the models")
    base_ref, model_ref = ModelRef.parse(settings.base), ModelRef.parse(settings.model)
    local_inputs = local_input_folders((base_ref, model_ref))
    with StagedOutput(settings.out, overwrite=settings.overwrite, inputs=local_inputs, kind="extract") as staged:
        # Headers first (over HTTP range requests for Hub models): an unrelated pair is refused before a download.
        _check_related(read_headers(base_ref), read_headers(model_ref), str(base_ref), str(model_ref))
        base_reader, model_reader = open_readers((base_ref, model_ref), progress)
        try:
            try:
                base, tuned = base_reader.checkpoint, model_reader.checkpoint
                task_type = task_type_for(base.config)
                transposed = (base.config or {}).get("model_type") in _TRANSPOSED_LINEAR_MODELS
                out_dtype = dtype or _storage_dtype(tuned)
                found = _compare(
                    base_reader, model_reader, settings, include, exclude, task_type, transposed, device, compute,
                    out_dtype, progress,
                )
                _refuse_empty(found, str(base_ref), str(model_ref))
                lora_bias = _settle_biases(found, tuned)
                found.tied_embedding = _tied_embedding(found, base, task_type)
                config = _adapter_config(
                    found, base.tensors, task_type, base_ref, base_reader.folder, lora_bias, transposed
                )
                plan = _write_weights(staged.path, found, tuned, model_reader, out_dtype, lora_bias, progress)
                adapter_bytes = (staged.path / ADAPTER_WEIGHTS).stat().st_size
                report, warnings = _report(found, settings, str(base_ref), str(model_ref), out_dtype, adapter_bytes,
                                           started)
                (staged.path / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
                (staged.path / "extraction_report.json").write_text(json.dumps(report, indent=2) + "\n")
                (staged.path / "README.md").write_text(_card(config, report, str(model_ref)))
            finally:
                model_reader.close()
        finally:
            base_reader.close()
        output = staged.commit(progress)
    for warning in warnings:
        progress.warn(warning)
    totals = report["totals"]
    return {
        "output": str(output),
        "adapter_bytes": adapter_bytes,
        "tensors": len(plan),
        "lora_modules": totals["lora_modules"],
        "saved_modules": totals["saved_modules"],
        "unchanged_modules": totals["unchanged_modules"],
        "mean_retained_energy": totals["mean_retained_energy"],
        "worst_modules": report["worst_modules"],
        # Each LoRA module's rank and retained energy, for the window's chart of the result.
        "module_energies": [{"module": m["module"], "rank": m["rank"], "retained_energy": m["retained_energy"]}
                            for m in report["modules"] if m["kind"] in ("lora", "embedding_lora")],
        # The job's summary is the window's (the Jobs page, the history): its words, not the command line's.
        "warnings": [for_window(warning) for warning in warnings],
    }


def _validate(settings: ExtractionSettings
              ) -> tuple[BoundedPattern | None, BoundedPattern | None, torch.dtype, torch.dtype | None]:
    """The settings checked: the include and exclude patterns, the compute dtype and the adapter's dtype (None: the
    fine-tune's). Raises SettingsError naming the setting at fault."""
    settings.rule.validate()
    if settings.solver not in SOLVERS:
        raise SettingsError(f'"{settings.solver}" is not a solver.', hint="Use randomized (fast) or exact.",
                            key="solver")
    if settings.embeddings not in EMBEDDING_POLICIES:
        raise SettingsError(
            f'"{settings.embeddings}" is not a way to handle embeddings.',
            hint="Use save (store changed embeddings whole), lora (decompose them) or skip.", key="embeddings",
        )
    dtypes: dict[str, torch.dtype | None] = {}
    for setting, name in (("dtype", settings.dtype), ("compute_dtype", settings.compute_dtype)):
        try:
            dtypes[setting] = dtype_from_name(name) if name else None
        except ValueError as error:
            raise SettingsError(str(error), hint="Use bfloat16, float16 or float32.", key=setting) from None
    compute = dtypes["compute_dtype"]
    if dtype_name(compute) not in COMPUTE:
        raise SettingsError(
            f"Decompositions run in float32 or float64, not {settings.compute_dtype}.",
            hint=say("Half precision has no SVD kernels; the adapter can still be stored in bfloat16{aside:{dtype}}."),
            key="compute_dtype",
        )
    include, exclude = ((BoundedPattern(text, option, SettingsError) if text else None)
                        for option, text in (("--include", settings.include), ("--exclude", settings.exclude)))
    return include, exclude, compute, dtypes["dtype"]


def pair_problem(base: ModelHeaders, tuned: ModelHeaders, base_label: str, model_label: str
                 ) -> CompatibilityProblem | None:
    """The first reason `tuned` is not a fine-tune of `base` (the one compatibility check, over their weights:
    buffers such as rotary frequencies are left out), or None when they pair up. Never raises."""

    def weights(headers: ModelHeaders, label: str) -> ModelFacts:
        return ModelFacts.of(label, {n: i for n, i in headers.tensors.items() if _is_weight(n, i)}, headers.config)

    return compare_models([weights(base, base_label), weights(tuned, model_label)]).first()


def _check_related(base: ModelHeaders, tuned: ModelHeaders, base_label: str, model_label: str) -> None:
    """Refuse, from configs and headers, a pair that is not a base and its fine-tune (IncompatibleModelsError)."""
    problem = pair_problem(base, tuned, base_label, model_label)
    if problem is not None:
        raise IncompatibleModelsError(problem.message, hint=problem.hint)


def _compare(
    base_reader: ModelReader,
    model_reader: ModelReader,
    settings: ExtractionSettings,
    include: BoundedPattern | None,
    exclude: BoundedPattern | None,
    task_type: str,
    transposed: bool,
    device: torch.device,
    compute: torch.dtype,
    out_dtype: torch.dtype,
    progress: Progress,
) -> _Found:
    tuned = model_reader.checkpoint
    modules: dict[str, list[str]] = {}
    for name, info in tuned.tensors.items():
        if _is_weight(name, info):
            modules.setdefault(split_module(name)[0], []).append(name)
    found = _Found()
    total_bytes = 2 * sum(tuned.tensors[n].nbytes for names in modules.values() for n in names)
    forced_heads = CLASSIFIER_HEADS.get(task_type, ())
    entries = []
    for module, names in modules.items():
        weight = tuned.tensors.get(module + ".weight")
        vocabulary = weight is not None and (is_embedding(module, weight.shape) or is_output_head(module))
        may_decompose = (
            weight is not None and len(weight.shape) == 2 and (settings.embeddings == "lora" or not vocabulary)
        )
        entries.append((module, names, weight, vocabulary, may_decompose))
    # The bar and its time left follow the work, not the bytes: a decomposition takes many times its reading, so
    # by bytes the embeddings (read first) made the bar jump ahead and the time left come out half the real one.
    works = [sum(module_work(tuned.tensors[n].shape, 2 * tuned.tensors[n].nbytes,
                             settings.rule if may_decompose and n == module + ".weight" else None, settings.solver)
                 for n in names) for module, names, _, _, may_decompose in entries]
    progress.start_stage("Extracting", total=len(modules), bytes_total=total_bytes, work_total=sum(works))

    def differences(index: int) -> dict[str, torch.Tensor | None]:
        _, names, _, _, may_decompose = entries[index]
        changed = {}
        for name in names:
            is_changed, delta = _difference(base_reader, model_reader, name, device, compute, may_decompose, settings)
            if is_changed:
                changed[name] = delta
        return changed

    # The next module's tensors are read and differenced (memory-bound: one torch thread) while the current one
    # is decomposed (compute-bound: the cores the thread policy gives); at most one module waits, so memory stays
    # a few tensors.
    with ThreadPoolExecutor(1, "mergesmith-read", initializer=use_cpu_threads, initargs=(1,)) as reads, \
            threads_restored():
        pending: Future | None = reads.submit(differences, 0) if entries else None
        try:
            for index, (module, names, weight, vocabulary, _) in enumerate(entries):
                changed = pending.result()
                pending = reads.submit(differences, index + 1) if index + 1 < len(entries) else None
                if short_name(module) in forced_heads:
                    _save(found, module, names, "the task's classification head (PEFT always loads it from the adapter)")
                elif not changed:
                    found.unchanged.append(module)
                elif (include and not include.search(module)) or (exclude and exclude.search(module)):
                    found.excluded.append(module)
                elif vocabulary and settings.embeddings == "skip":
                    found.skipped.append(module)
                else:
                    use_cpu_threads(settings.threads.threads_for(WorkKind.DENSE))
                    _store_module(found, module, names, changed, weight, settings, transposed, out_dtype)
                del changed
                progress.step(module, nbytes=2 * sum(tuned.tensors[n].nbytes for n in names), work=works[index])
        except BaseException:
            if pending is not None and not pending.cancel():
                pending.exception()  # let the read finish before the readers are closed under it
            raise
    return found


def _difference(
    base_reader: ModelReader,
    model_reader: ModelReader,
    name: str,
    device: torch.device,
    compute: torch.dtype,
    keep_delta: bool,
    settings: ExtractionSettings,
) -> tuple[bool, torch.Tensor | None]:
    """Whether tensor `name` changed beyond rounding, and its update when `keep_delta` (else None).

    Tensors that will not be decomposed (embeddings to save whole, norms) are compared in row blocks, so a large
    vocabulary never needs three full float32 copies at once. Raises NonFiniteResultError for NaN/infinity.
    """
    base_tensor, tuned_tensor = base_reader.read(name), model_reader.read(name)
    if keep_delta or base_tensor.ndim == 0:
        blocks = [(base_tensor, tuned_tensor)]
    else:
        rows = max(1, _COMPARE_BLOCK // max(1, base_tensor[0].numel()))
        blocks = list(zip(base_tensor.split(rows), tuned_tensor.split(rows)))
    delta_energy = base_energy = 0.0
    delta = None
    for base_block, tuned_block in blocks:
        base_part = base_block.to(device, compute)
        # Out of place: a float32 tensor read from a memory map may be the mapped data itself.
        delta = tuned_block.to(device, compute) - base_part
        if not bool(torch.isfinite(delta).all()):
            raise NonFiniteResultError(
                f"{name} contains NaN or infinity in {settings.model} or {settings.base}.",
                hint="The model file is damaged or the fine-tune diverged; download it again or use another "
                "checkpoint.",
            )
        delta_energy += float(torch.linalg.vector_norm(delta)) ** 2
        base_energy += float(torch.linalg.vector_norm(base_part)) ** 2
    changed = delta_energy**0.5 > UNCHANGED_TOLERANCE * base_energy**0.5
    return changed, (delta if keep_delta and changed else None)


def _store_module(
    found: _Found,
    module: str,
    names: list[str],
    changed: dict[str, torch.Tensor],
    weight: TensorInfo | None,
    settings: ExtractionSettings,
    transposed: bool,
    out_dtype: torch.dtype,
) -> None:
    """Decide how a changed module goes into the adapter and compute its factors if it is a LoRA."""
    weight_name, bias_name = module + ".weight", module + ".bias"
    embedding = weight is not None and is_embedding(module, weight.shape)
    head = weight is not None and is_output_head(module)
    lora_able = (
        weight is not None
        and len(weight.shape) == 2
        and set(changed) <= {weight_name, bias_name}
        and (settings.embeddings == "lora" or not (embedding or head))
        and not (embedding and bias_name in changed)
    )
    if not lora_able:
        what = ", ".join(split_module(n)[1] for n in changed)
        _save(found, module, names, f"{what} changed" + (" (--embeddings save)" if embedding or head else ""))
        return
    if bias_name in changed:
        found.bias_deltas[module] = changed[bias_name].to("cpu", out_dtype)
    delta = changed.get(weight_name)
    if delta is None:
        # Only the bias changed (BitFit): a rank-1 LoRA with zero factors carries it as lora_B.bias.
        out_features, in_features = reversed(weight.shape) if transposed else weight.shape
        found.factors[module] = (
            torch.zeros(out_features, 1, dtype=out_dtype), torch.zeros(1, in_features, dtype=out_dtype)
        )
        found.reports[module] = ModuleReport(module, "bias_only", list(weight.shape), rank=1, reason="bias changed")
        return
    # PEFT's embedding LoRA and fan_in_fan_out layers store B·A as the transpose of the weight.
    matrix = delta.T if (embedding or transposed) else delta
    parts = decompose(matrix, settings.rule, settings.solver)
    left, right = parts.left.to(out_dtype), parts.right.to(out_dtype)
    error = relative_error(matrix, left, right)
    found.factors[module] = (left.to("cpu"), right.to("cpu"))
    found.reports[module] = ModuleReport(
        module, "embedding_lora" if embedding else "lora", list(weight.shape), parts.rank,
        round(parts.retained_energy, 6), round(error, 6),
    )


def _save(found: _Found, module: str, names: list[str], reason: str) -> None:
    found.saved[module] = names
    found.factors.pop(module, None)
    found.bias_deltas.pop(module, None)
    found.reports[module] = ModuleReport(module, "saved", [], reason=reason)


def _refuse_empty(found: _Found, base_label: str, model_label: str) -> None:
    if found.factors or found.saved:
        return
    if not found.excluded and not found.skipped:
        raise IncompatibleModelsError(
            f"The two models are identical: no tensor of {model_label} differs from {base_label}, so an adapter "
            "would change nothing.",
            why="An extracted adapter holds the difference between a fine-tune and its base, and two identical "
            "models have none.",
            hint="Check that you chose the fine-tuned model and not a copy of the base.",
        )
    left_out = found.excluded + found.skipped
    raise SettingsError(
        f"Every changed module was left out by the settings ({', '.join(left_out[:3])}"
        + (f" and {len(left_out) - 3} more" if len(left_out) > 3 else "") + "), so the adapter would change nothing.",
        hint=say("Widen {module_filters}, or {save_embeddings} if only the embeddings changed."),
    )


def _tied_embedding(found: _Found, base: Checkpoint, task_type: str) -> str | None:
    """The input embedding, when the adapter holds it and the base's output head is tied to it (a causal LM
    whose checkpoint has no head of its own)."""
    if task_type != "CAUSAL_LM" or any(is_output_head(split_module(name)[0]) for name in base.tensors):
        return None
    embeddings = [
        split_module(name)[0] for name, info in base.tensors.items()
        if name.endswith(".weight") and is_embedding(split_module(name)[0], info.shape)
    ]
    if not embeddings:
        return None
    largest = max(embeddings, key=lambda module: base.tensors[module + ".weight"].shape[0])
    return largest if largest in found.factors or largest in found.saved else None


def _settle_biases(found: _Found, tuned: Checkpoint) -> bool:
    """Whether the adapter uses lora_bias; PEFT cannot combine it with embedding LoRAs, so then the modules
    whose bias changed are saved whole instead."""
    if not found.bias_deltas:
        return False
    if any(report.kind == "embedding_lora" for report in found.reports.values()):
        for module in list(found.bias_deltas):
            names = [n for n in (module + ".weight", module + ".bias") if n in tuned.tensors]
            _save(found, module, names, "bias changed (saved whole: PEFT has no LoRA bias next to embedding LoRAs)")
        return False
    return True


def _adapter_config(
    found: _Found,
    base_tensors: dict[str, TensorInfo],
    task_type: str,
    base_ref: ModelRef,
    base_folder: Path,
    lora_bias: bool,
    transposed: bool,
) -> dict[str, Any]:
    # A tied head must stay tied in PEFT (ensure_weight_tying, which then expects the head's entries too). PEFT
    # finds the embedding of a saved head only by the name embed_tokens; for others (GPT-2's wte) the saved
    # head's weight loads into the shared parameter instead, and an embedding LoRA needs the head as a target.
    peft_ties = found.tied_embedding is not None and short_name(found.tied_embedding) in PEFT_TIED_EMBEDDINGS
    head_target = [TIED_HEAD] if found.tied_embedding in found.factors and not peft_ties else []
    ranks = {module: found.reports[module].rank for module in found.factors}
    default_rank = Counter(ranks.values()).most_common(1)[0][0] if ranks else 8
    pattern = {module: rank for module, rank in ranks.items() if rank != default_rank}
    return {
        "peft_type": "LORA",
        "task_type": task_type,
        "base_model_name_or_path": base_ref.hub_id or str(base_folder),
        "revision": base_ref.revision,
        "r": default_rank,
        "lora_alpha": default_rank,
        "rank_pattern": pattern,
        "alpha_pattern": dict(pattern),  # alpha = rank everywhere: scale 1, B·A is the update itself
        "target_modules": _target_modules(list(found.factors), base_tensors, set(found.saved)) + head_target,
        "modules_to_save": sorted(found.saved) or None,
        "lora_dropout": 0.0,
        "lora_bias": lora_bias,
        "bias": "none",
        "fan_in_fan_out": transposed,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "layers_to_transform": None,
        "layers_pattern": None,
        "ensure_weight_tying": peft_ties or bool(head_target),
    }


def _target_modules(targets: list[str], base_tensors: dict[str, TensorInfo], saved: set[str]) -> list[str]:
    """Module-name suffixes where every module of that name is a target, full names otherwise."""
    by_suffix: dict[str, set[str]] = {}
    for name in base_tensors:
        module = split_module(name)[0]
        if module not in saved:
            by_suffix.setdefault(short_name(module), set()).add(module)
    chosen: set[str] = set()
    target_set = set(targets)
    for suffix in {short_name(m) for m in targets}:
        if by_suffix.get(suffix, set()) <= target_set:
            chosen.add(suffix)
        else:
            chosen.update(m for m in targets if short_name(m) == suffix)
    return sorted(chosen)


def _write_weights(
    folder: Path, found: _Found, tuned: Checkpoint, model_reader: ModelReader, out_dtype: torch.dtype,
    lora_bias: bool, progress: Progress,
) -> list[PlannedTensor]:
    tensors: list[tuple[PlannedTensor, Any]] = []  # (plan entry, the tensor or a callable reading it)
    for module, (left, right) in found.factors.items():
        key = PEFT_PREFIX + module + "."
        if found.reports[module].kind == "embedding_lora":
            tensors.append((PlannedTensor(key + EMBEDDING_A, tuple(right.shape), out_dtype), right))
            tensors.append((PlannedTensor(key + EMBEDDING_B, tuple(left.shape), out_dtype), left))
            continue
        tensors.append((PlannedTensor(key + LORA_A, tuple(right.shape), out_dtype), right))
        tensors.append((PlannedTensor(key + LORA_B, tuple(left.shape), out_dtype), left))
        if lora_bias:
            bias = found.bias_deltas.get(module, torch.zeros(left.shape[0], dtype=out_dtype))
            tensors.append((PlannedTensor(key + LORA_B_BIAS, tuple(bias.shape), out_dtype), bias))
    for names in found.saved.values():
        for name in names:
            info = tuned.tensors[name]
            dtype = out_dtype if info.dtype.is_floating_point else info.dtype
            tensors.append((PlannedTensor(PEFT_PREFIX + name, info.shape, dtype), name))
    if found.tied_embedding in found.factors:
        left, right = found.factors[found.tied_embedding]
        key = PEFT_PREFIX + TIED_HEAD + "."
        tensors.append((PlannedTensor(key + LORA_A, (left.shape[1], left.shape[0]), out_dtype), left.T.contiguous()))
        tensors.append((PlannedTensor(key + LORA_B, (right.shape[1], right.shape[0]), out_dtype), right.T.contiguous()))
    elif found.tied_embedding in found.saved:
        info = tuned.tensors[found.tied_embedding + ".weight"]
        tensors.append((PlannedTensor(PEFT_PREFIX + TIED_HEAD + ".weight", info.shape, out_dtype), info.name))
    plan = [planned for planned, _ in tensors]
    check_free_space(folder, sum(p.nbytes for p in plan))
    progress.start_stage("Writing the adapter", total=len(plan), bytes_total=sum(p.nbytes for p in plan))
    writer = ShardedWriter(folder, plan, max_shard_bytes=2**62, filename_prefix="adapter_model")
    try:
        for planned, source in tensors:
            tensor = model_reader.read(source) if isinstance(source, str) else source
            writer.write(planned.name, tensor.to(planned.dtype))
            progress.step(planned.name, nbytes=planned.nbytes)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return plan


def _report(
    found: _Found, settings: ExtractionSettings, base_label: str, model_label: str, out_dtype: torch.dtype,
    adapter_bytes: int, started: float,
) -> tuple[dict[str, Any], list[str]]:
    """The extraction report (written beside the adapter, in the command line's words) and its warnings, each
    carrying the window's words too."""
    lora = [r for r in found.reports.values() if r.kind in ("lora", "embedding_lora")]
    # Ranked by the one metric the window shows for each module: the share of its change the adapter keeps.
    worst = sorted(lora, key=lambda r: r.retained_energy if r.retained_energy is not None else 1.0)[:5]
    warnings = []
    if found.excluded:
        warnings.append(say("{count} changed modules were left out by {module_filters} (such as {example}): the "
                            "adapter does not reproduce them.", count=len(found.excluded), example=found.excluded[0]))
    if found.skipped:
        warnings.append(say("The changed embeddings and output head were skipped{aside:{embeddings:skip}}: "
                            "{names}.", names=", ".join(found.skipped)))
    return {
        "mergesmith_version": __version__,
        "base": base_label,
        "model": model_label,
        "settings": {
            "rank_mode": settings.rule.mode, "rank_value": settings.rule.value, "max_rank": settings.rule.max_rank,
            "solver": settings.solver, "embeddings": settings.embeddings, "include": settings.include,
            "exclude": settings.exclude, "dtype": dtype_name(out_dtype), "compute_dtype": settings.compute_dtype,
            "device": settings.device,
        },
        "modules": [asdict(report) for report in found.reports.values()],
        "unchanged_modules": found.unchanged,
        "changed_but_excluded": found.excluded,
        "changed_but_skipped": found.skipped,
        "worst_modules": [{"module": r.module, "rank": r.rank, "retained_energy": r.retained_energy,
                           "relative_error": r.relative_error} for r in worst],
        "warnings": [str(warning) for warning in warnings],
        "totals": {
            "lora_modules": sum(1 for r in found.reports.values() if r.kind != "saved"),
            "saved_modules": len(found.saved),
            "unchanged_modules": len(found.unchanged),
            "mean_retained_energy": round(sum(r.retained_energy for r in lora) / len(lora), 6) if lora else None,
            "mean_relative_error": round(sum(r.relative_error for r in lora) / len(lora), 6) if lora else None,
            "max_relative_error": max((r.relative_error or 0.0 for r in lora), default=None),
            "mean_rank": round(sum(r.rank for r in lora) / len(lora), 2) if lora else None,
            "adapter_bytes": adapter_bytes,
            "elapsed_seconds": round(time.monotonic() - started, 2),
        },
    }, warnings


def _card(config: dict[str, Any], report: dict[str, Any], model_label: str) -> str:
    front = yaml.safe_dump(
        {"library_name": "peft", "base_model": config["base_model_name_or_path"], "tags": ["lora", "mergesmith"]},
        sort_keys=False,
    ).strip()
    totals = report["totals"]
    saved = config["modules_to_save"] or []
    energy = totals["mean_retained_energy"]
    lines = [
        "---", front, "---", "",
        f"# LoRA extracted from {model_label}", "",
        f"Extracted by Mergesmith {__version__} as the difference between {model_label} and its base "
        f"{report['base']}, with the {report['settings']['solver']} solver.", "",
        f"- LoRA modules: {totals['lora_modules']} (rank {config['r']}"
        + (f", {len(config['rank_pattern'])} with other ranks" if config["rank_pattern"] else "") + ")",
        f"- Mean retained energy: {energy:.4f}" if energy is not None else "- Mean retained energy: n/a",
        f"- Modules saved whole: {', '.join(saved) if saved else 'none'}",
        f"- Unchanged modules skipped: {totals['unchanged_modules']}", "",
        "```python",
        "from peft import PeftModel",
        "model = PeftModel.from_pretrained(base_model, \"path/to/this/folder\")",
        "```", "",
        "Per-module ranks and errors are in `extraction_report.json`.", "",
    ]
    return "\n".join(lines)


def _is_weight(name: str, info: TensorInfo) -> bool:
    return info.dtype.is_floating_point and not name.endswith(_BUFFER_SUFFIXES)


def _storage_dtype(checkpoint: Checkpoint) -> torch.dtype:
    counts = Counter(info.dtype for info in checkpoint.tensors.values() if info.dtype.is_floating_point)
    dtype = counts.most_common(1)[0][0] if counts else torch.float32
    return dtype if dtype.itemsize >= 2 else torch.bfloat16  # fp8 is no format for small factors

