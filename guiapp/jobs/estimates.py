"""What a job will need before it starts: memory, disk and time, from headers alone, and whether it fits.

Memory is private (anonymous) memory: the page cache holding the model files is reclaimed by the system under
pressure; what cannot be reclaimed is what the loop reads into its own buffers and the float32 working set of
the tensors being merged, which the merge loop states itself (guiapp.merging.merge.working_set).
"""

from __future__ import annotations

import functools
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from guiapp.jobs.durations import estimate_duration, timing_key, work_begins
from guiapp.system.resources import Fit, TimeEstimate, fit_verdict

# What a job adds besides tensors: the reader and writer threads, torch's worker threads and their allocator
# arenas, open memory maps' bookkeeping (measured: 50–80 MB on Linux).
_JOB_OVERHEAD_BYTES = 64 * 1024 * 1024
# Python, torch and Mergesmith themselves, when the estimate is made in a process that has not loaded torch yet.
_RUNTIME_BYTES = 350 * 1024 * 1024


@dataclass(frozen=True)
class JobEstimate:
    """A job's needs and the verdict for this machine. `peak_ram` includes the process that runs it."""

    peak_ram: int
    peak_vram: int
    output_bytes: int
    time: TimeEstimate | None
    fit: Fit

    def summary(self) -> str:
        time = f"\n  Time: {self.time}" if self.time else ""
        return self.fit.summary() + time


def private_memory() -> int:
    """Anonymous (not file-backed) resident memory of this process: RssAnon on Linux, else USS."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return psutil.Process().memory_full_info().uss


def process_baseline() -> int:
    """Private memory of this process now, plus torch's if it is not loaded yet."""
    return private_memory() + (0 if "torch" in sys.modules else _RUNTIME_BYTES)


def estimate_merge(plan, device: str, destination: Path, probe_result=None, *,
                   startup_seconds: float = 0.0) -> JobEstimate:
    """Estimate the merge `plan` on `device` into `destination`: memory, disk, time and the fit verdict.

    The time (guiapp.jobs.durations) comes from earlier merges with this method here or, before any, from
    `probe_result` (guiapp.system.probe.ProbeResult); it is None without either. `startup_seconds`: what a new
    process spends before the job starts (the CLI's dry run). Inside a job, this also marks where its work
    begins, to learn the method's throughput. Raises OutputError / DeviceError when the destination's drive or
    the GPU cannot be examined.
    """
    from guiapp.merging.merge import working_set  # loaded with the plan; Try's estimates need no torch

    working = working_set(plan) + _JOB_OVERHEAD_BYTES
    on_gpu = device != "cpu"
    peak_ram = process_baseline() + (_largest_output(plan) if on_gpu else working)
    peak_vram = working if on_gpu else 0
    key = timing_key("merge", plan.method.name)
    time = estimate_duration(key, plan.input_bytes, probe_result, device, startup_seconds=startup_seconds,
                             download_bytes=sum(_download_bytes(model) for model in plan.models))
    work_begins(key, plan.input_bytes)
    fit = fit_verdict(peak_ram, peak_vram, plan.output_bytes, device, destination)
    return JobEstimate(peak_ram, peak_vram, plan.output_bytes, time, fit)


def _download_bytes(model) -> int:
    """The weights of a Hub model (its ModelHeaders) still to download; 0 when local or in the cache already."""
    if model.ref.is_local:
        return 0
    from guiapp.errors import OfflineError
    from guiapp.hub.resolve import resolve_model

    try:
        resolve_model(model.ref, offline=True)  # the cache only, no network
    except OfflineError:
        return sum(info.nbytes for info in model.tensors.values())
    return 0


def _largest_output(plan) -> int:
    return max((math.prod(t.shape) * plan.out_tensor_dtype(t).itemsize for t in plan.tasks), default=0)


# Float32 copies of the largest matrix an extraction holds: base, fine-tune, their difference, and the
# decomposition's factors and workspace (measured by benchmarks/extract.py: about five).
_EXTRACT_COPIES = 5
# A tensor's entry in the adapter's safetensors header: its PEFT name, dtype, shape and offsets (measured: about
# 120 bytes for Llama-style names).
_ADAPTER_HEADER_ENTRY_BYTES = 160
# Applying an adapter holds the base tensor, its float32 copy, the update and the cast result.
_APPLY_COPIES = 4


def estimate_extraction(base, model, device: str, destination: Path, probe_result=None, rank: int = 32,
                        solver: str = "randomized", embeddings: str = "save", *, rule=None,
                        startup_seconds: float = 0.0) -> JobEstimate:
    """Estimate extracting a LoRA of `model` against `base` (guiapp.checkpoints.sources.ModelHeaders of each), with
    changed embeddings and output head handled as `embeddings` says ("save", "lora" or "skip"), each matrix
    decomposed by `rule` (a guiapp.lora.lowrank.RankRule; None: a fixed `rank`) and `solver`.

    Time, `startup_seconds` and the start of the work as `estimate_merge`. Raises OutputError / DeviceError when
    the destination's drive or the GPU cannot be examined.
    """
    matrices = [info.shape for info in model.tensors.values() if len(info.shape) == 2]
    largest = max((rows * cols * 4 for rows, cols in matrices), default=0)
    working = _EXTRACT_COPIES * largest + _JOB_OVERHEAD_BYTES
    on_gpu = device != "cpu"
    peak_ram = process_baseline() + (2 * largest if on_gpu else working)
    output_bytes = sum(_adapter_bytes(name, info, rank, embeddings) for name, info in model.tensors.items())
    work = extraction_work(model, rule or _fixed_rank(rank), solver, embeddings)
    key = timing_key("extract", "exact" if solver == "exact" else None)
    time = estimate_duration(key, round(work), probe_result, device, startup_seconds=startup_seconds)
    work_begins(key, round(work))
    fit = fit_verdict(peak_ram, working if on_gpu else 0, output_bytes, device, destination)
    return JobEstimate(peak_ram, working if on_gpu else 0, output_bytes, time, fit)


def extraction_work(model, rule, solver: str, embeddings: str) -> float:
    """The work of extracting from `model` (its ModelHeaders), as the extraction's progress counts it: each weight
    matrix it decomposes by its decomposition's cost (which grows with the rank and, for the exact solver, with
    the matrix's size, where the bytes do not), the tensors it only compares by their bytes."""
    from guiapp.lora.lowrank import module_work  # noqa: PLC0415 - loaded with the headers' reader

    return sum(module_work(info.shape, 2 * info.nbytes, rule if _decomposed(name, info, embeddings) else None, solver)
               for name, info in model.tensors.items())


def _fixed_rank(rank: int):
    from guiapp.lora.lowrank import RankRule  # noqa: PLC0415 - loaded with the headers' reader

    return RankRule("fixed", rank)


def _is_vocabulary(name: str, info) -> bool:
    """Whether a fine-tune tensor is the embeddings or the output head (extraction treats them as `embeddings`
    says)."""
    from guiapp.checkpoints.peft_format import is_embedding, is_output_head  # noqa: PLC0415 - torch-free, only here

    module = name.rsplit(".", 1)[0]
    return len(info.shape) == 2 and (is_embedding(module, info.shape) or is_output_head(module))


def _decomposed(name: str, info, embeddings: str) -> bool:
    """Whether extraction decomposes this tensor into LoRA factors (a matrix, and not a vocabulary one that is
    saved whole or skipped)."""
    return len(info.shape) == 2 and (embeddings == "lora" or not _is_vocabulary(name, info))


def _adapter_bytes(name: str, info, rank: int, embeddings: str) -> int:
    """What one fine-tune tensor adds to the adapter if it changed (an upper bound: unchanged ones add nothing).

    Matrices become LoRA factors of `rank`; embeddings and the output head follow `embeddings`; anything else
    (norms, biases of saved modules) is saved whole. In the fine-tune's storage precision, as extraction writes.
    """
    if _is_vocabulary(name, info) and embeddings == "skip":
        return 0
    if _decomposed(name, info, embeddings):
        rows, cols = info.shape
        factors = (rows + cols) * min(rank, rows, cols) * (info.nbytes // max(1, info.numel))
        return factors + 2 * _ADAPTER_HEADER_ENTRY_BYTES
    return info.nbytes + _ADAPTER_HEADER_ENTRY_BYTES


def estimate_apply(base, device: str, destination: Path, probe_result=None, *,
                   startup_seconds: float = 0.0) -> JobEstimate:
    """Estimate writing `base` (its ModelHeaders) with an adapter applied: a full model's worth of disk.

    Time, `startup_seconds` and the start of the work as `estimate_merge`."""
    largest = max((info.numel * 4 for info in base.tensors.values()), default=0)
    working = _APPLY_COPIES * largest + _JOB_OVERHEAD_BYTES
    on_gpu = device != "cpu"
    peak_ram = process_baseline() + (2 * largest if on_gpu else working)
    output_bytes = sum(info.nbytes for info in base.tensors.values())
    time = estimate_duration("apply", output_bytes, probe_result, device, startup_seconds=startup_seconds)
    work_begins("apply", output_bytes)
    fit = fit_verdict(peak_ram, working if on_gpu else 0, output_bytes, device, destination)
    return JobEstimate(peak_ram, working if on_gpu else 0, output_bytes, time, fit)



# The loaded base model for hidden gates, over its weights in the compute dtype (transformers' buffers, activations).
_MOE_LOADED_OVERHEAD = 1.3
# Tokens per prompt when counting the forward passes' cost (prompts are a sentence or two).
_MOE_TOKENS_PER_PROMPT = 32


def estimate_moe(plan, destination: Path, probe_result=None, *, startup_seconds: float = 0.0) -> JobEstimate:
    """What assembling `plan` (a guiapp.moe.assemble.MoePlan) needs: one expert's largest tensor at a time in
    float32 (read, scaled, cast) or, for hidden gates, the base model loaded in the gates' dtype; the output on
    disk; the time to copy the bytes plus, for hidden gates, the base's forward passes over the prompts."""
    largest = max((t.nbytes // t.shape[0] * 4 if t.shape else 0 for t in plan.planned), default=0)
    working = 3 * largest + _JOB_OVERHEAD_BYTES
    hidden = plan.config.gate_mode in ("hidden", "hidden_last")
    if hidden:
        working = max(working, int(plan.base_parameters * plan.gate_dtype.itemsize * _MOE_LOADED_OVERHEAD))
    on_gpu = plan.device != "cpu"
    peak_ram = process_baseline() + working
    time = estimate_duration("moe", plan.output_bytes, probe_result, "cpu", startup_seconds=startup_seconds)
    work_begins("moe", plan.output_bytes)
    if time is not None and hidden:
        prompts = sum(len(e.positive_prompts) + len(e.negative_prompts)
                      for e in (*plan.config.experts, *plan.config.shared_experts))
        extra = forward_seconds(plan.base_parameters, plan.base_parameters * plan.gate_dtype.itemsize,
                                prompts * _MOE_TOKENS_PER_PROMPT)
        time = TimeEstimate(time.seconds + extra, time.basis + ", plus the base's forward passes on the prompts",
                            (time.low or time.seconds) + extra * 0.5, (time.high or time.seconds) + extra * 2)
    gpu_working = working if on_gpu and hidden else 0
    fit = fit_verdict(peak_ram, gpu_working, plan.output_bytes, plan.device, destination)
    return JobEstimate(peak_ram, gpu_working, plan.output_bytes, time, fit)


# Try and Perplexity on the CPU, in seconds of a quiet machine (benchmarks/estimates.py: byte-level and
# 8k–24k-word vocabularies, 20M–165M parameters, each time divided by `machine_slowdown`): loading a model reads
# and converts its weights; each generated token runs the whole model once (its weights read from memory: per
# parameter) plus a fixed cost per step; scoring a text runs it over a window of tokens at once, far cheaper per
# token. The first model a process loads also imports transformers.
_IMPORT_SECONDS = 1.5
_LOAD_SECONDS_PER_BYTE = 0.6e-9
_GENERATE_SECONDS_PER_TOKEN = 3e-3
_GENERATE_SECONDS_PER_PARAMETER = 0.19e-9
_SCORE_SECONDS_PER_TOKEN = 0.12e-3
_SCORE_SECONDS_PER_PARAMETER = 8e-12
# A text's tokens when no tokenizer of the model is on this computer yet: about four characters each in English.
_CHARACTERS_PER_TOKEN = 4
# The part of a text its tokenizer counts for an estimate: a long text is not tokenized whole before its job runs.
_SAMPLE_CHARACTERS = 4_000
# The durations module counts these jobs' work in nanoseconds of the reference machine.
_NANOSECONDS = 1e9


def summary_of_time(time: TimeEstimate | None) -> dict:
    """A time estimate as a job's summary keeps it (`estimate`: seconds, low, high, text; {} when the time is not
    known), so the window can show the estimate against the actual time when the job ends."""
    if time is None:
        return {}
    return {"estimate": {"seconds": time.seconds, "low": time.low, "high": time.high, "text": str(time)}}


def estimate_generation(plan, prompt: str, max_new_tokens: int, probe_result=None, *,
                        startup_seconds: float = 0.0) -> TimeEstimate | None:
    """How long Try's Generate takes for `plan` (guiapp.jobs.tryout.TryPlan): each model loaded, the prompt read
    and up to `max_new_tokens` generated (a model that stops early takes less). None on a GPU or with nothing to
    go by (as `estimate_duration`; `startup_seconds` as there). Inside a job, marks where its work begins. Never
    raises."""
    work = sum(_load_seconds(model, first=index == 0) + _token_count(model.reference, prompt)
               * _score_seconds(model) + max_new_tokens * (_GENERATE_SECONDS_PER_TOKEN + model.parameters
                                                           * _GENERATE_SECONDS_PER_PARAMETER)
               for index, model in enumerate(plan.models))
    return _inference_estimate("try", work, plan.device, probe_result, startup_seconds)


def estimate_perplexity(plan, text: str, probe_result=None, *, startup_seconds: float = 0.0) -> TimeEstimate | None:
    """How long Perplexity takes for `plan` on `text`: each model loaded and run over the text's tokens (as
    `estimate_generation`)."""
    work = sum(_load_seconds(model, first=index == 0) + _token_count(model.reference, text) * _score_seconds(model)
               for index, model in enumerate(plan.models))
    return _inference_estimate("perplexity", work, plan.device, probe_result, startup_seconds)


def _inference_estimate(key: str, seconds: float, device: str, probe_result, startup_seconds: float
                        ) -> TimeEstimate | None:
    units = round(seconds * _NANOSECONDS)
    time = estimate_duration(key, units, probe_result, device, startup_seconds=startup_seconds)
    work_begins(key, units)
    return time


def _load_seconds(model, first: bool) -> float:
    imports = _IMPORT_SECONDS if first and "transformers" not in sys.modules else 0.0
    return imports + model.loaded_bytes * _LOAD_SECONDS_PER_BYTE


def _score_seconds(model) -> float:
    """Seconds per token of a text the model reads (a prompt, or the text it is scored on)."""
    return _SCORE_SECONDS_PER_TOKEN + model.parameters * _SCORE_SECONDS_PER_PARAMETER


def _token_count(reference: str, text: str) -> int:
    """About how many tokens `text` is for the model: its own tokenizer.json (when the model is on this computer)
    counts a sample of at most `_SAMPLE_CHARACTERS`, scaled to the whole text; else a count from the length.
    Never raises: a tokenizer that cannot be read or used (not a regular file, too large, one that panics) is the
    job's to name when it runs, and the estimate counts from the length instead."""
    from guiapp.hub.references import ModelRef
    from guiapp.hub.resolve import resolve_model

    by_length = max(1, len(text) // _CHARACTERS_PER_TOKEN)
    sample = text[:_SAMPLE_CHARACTERS]
    try:
        path = resolve_model(ModelRef.parse(reference), offline=True) / "tokenizer.json"
        facts = os.stat(path)  # the file is opened (as a regular file) only when it is new or changed
        tokenizer = _read_tokenizer(str(path), facts.st_mtime_ns, facts.st_size)
        counted = len(tokenizer.encode(sample).ids) if tokenizer is not None else None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # a Rust panic is a BaseException; any failure means: count from the length instead
        return by_length
    if counted is None:
        return by_length
    return max(1, round(counted * len(text) / max(1, len(sample))))


@functools.lru_cache(maxsize=4)
def _read_tokenizer(path: str, modified_ns: int, size: int) -> Any:
    """The tokenizer in `path` as the tokenizers library reads it (None when it is larger than a tokenizer can be),
    kept while the file stays as it was (`modified_ns`, `size`): the Try page estimates again as the user types.
    Raises MergesmithError when it is not a regular file, anything the library raises when it cannot read it."""
    from tokenizers import Tokenizer

    from guiapp.errors import MergesmithError
    from guiapp.system.bounded import TOKENIZER_JSON_BYTES, open_regular_file

    with open_regular_file(path, MergesmithError, what="tokenizer") as stream:
        definition = stream.read(TOKENIZER_JSON_BYTES + 1)
    if len(definition) > TOKENIZER_JSON_BYTES:
        return None
    return Tokenizer.from_str(definition.decode("utf-8"))


def forward_seconds(parameters: int, loaded_bytes: int, tokens: int) -> float:
    """Seconds on a quiet CPU to load a model of `loaded_bytes` and run it over `tokens` tokens (as Perplexity's
    estimate counts them)."""
    return loaded_bytes * _LOAD_SECONDS_PER_BYTE + tokens * (_SCORE_SECONDS_PER_TOKEN
                                                            + parameters * _SCORE_SECONDS_PER_PARAMETER)
