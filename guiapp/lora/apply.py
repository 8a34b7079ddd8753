"""Applying a PEFT LoRA adapter to a base model into a full model folder, tensor by tensor (`mergesmith apply-lora`).

The adapter is read and its deltas computed by guiapp.checkpoints.adapters, the same code that applies an adapter
on the fly for a `model+adapter` reference; this module streams the result into a new model folder.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.adapters import LoraAdapter, apply_inputs, open_adapter
from guiapp.checkpoints.quantized.layout import Quantization
from guiapp.checkpoints.quantized.notes import dequantized_from
from guiapp.checkpoints.reading import dtype_from_name
from guiapp.checkpoints.sources import ModelReader, open_reader, read_headers
from guiapp.checkpoints.writing import PlannedTensor, ShardedWriter, StagedOutput, check_free_space, parse_size
from guiapp.compute.devices import resolve_device, threads_restored, use_cpu_threads
from guiapp.errors import IncompatibleModelsError, NonFiniteResultError, SettingsError
from guiapp.facts.dtypes import dtype_name
from guiapp.facts.wording import say
from guiapp.hub.model_config import read_model_config
from guiapp.hub.references import ModelRef
from guiapp.merging.model_card import copy_companion_files
from guiapp.progress import Progress
from guiapp.system.threads import ThreadPolicy, WorkKind


@dataclass(frozen=True)
class ApplySettings:
    """What `mergesmith apply-lora` and the window's Apply LoRA form ask for.

    `dtype` None keeps each base tensor's own dtype; `scale` multiplies the adapter's effect; `threads` decides how
    many CPU threads the adapter's products (B·A) use (adding and casting use one).
    """

    base: str
    adapter: str
    out: Path
    scale: float = 1.0
    dtype: str | None = None
    device: str = "cpu"
    overwrite: bool = False
    max_shard_size: str = "5GB"
    threads: ThreadPolicy = field(default_factory=ThreadPolicy, compare=False)

    def __post_init__(self) -> None:
        """Raises SettingsError (key "scale") for a scale that is not a finite number: every changed weight would
        become NaN or infinite, found only when the first tensor is written."""
        if not math.isfinite(self.scale):
            raise SettingsError(f"The adapter's scale must be a finite number (got {self.scale}).",
                                hint="Use 1 for the adapter as it was trained, 0.5 for half its effect.", key="scale")


def apply_lora(settings: ApplySettings, progress: Progress | None = None) -> dict[str, Any]:
    """Write `settings.base` with `settings.adapter` applied as a full model folder at `settings.out`.

    Everything is checked from headers before any tensor is read: the adapter's format and kind, that it fits
    the base (IncompatibleModelsError), that it changes something, the output folder (OutputError) and the free
    space (InsufficientResourcesError). A tensor that becomes NaN/infinite stops the job (NonFiniteResultError).
    The output appears only when complete. Returns a summary: output, tensors changed/replaced, bytes written.
    """
    progress = progress or Progress()
    device = resolve_device(settings.device)
    out_dtype = _out_dtype(settings.dtype)
    try:
        shard_bytes = parse_size(settings.max_shard_size)
    except ValueError as error:
        raise SettingsError(str(error), hint="Example: 5GB", key="max_shard_size") from None
    progress.start_stage("Checking the base model and the adapter")
    base_ref = ModelRef.parse(settings.base)
    adapter = open_adapter(ModelRef.parse(settings.adapter), progress=progress, scale=settings.scale)
    # The base's headers (over HTTP range requests for a Hub model) are enough to refuse a mismatch before a download.
    base_headers = read_headers(base_ref)
    adapter.check_base(base_headers.tensors, str(base_ref))
    if adapter.changes_nothing():
        raise IncompatibleModelsError(
            f"The adapter {adapter.label} changes nothing: all its lora_B weights are zero, so the output would be "
            f"a copy of {base_ref}.",
            hint="This adapter was probably saved before training; use the trained adapter.",
        )
    plan = [
        PlannedTensor(name, info.shape, out_dtype if out_dtype and info.dtype.is_floating_point else info.dtype)
        for name, info in base_headers.tensors.items()
    ]
    with StagedOutput(settings.out, overwrite=settings.overwrite, inputs=apply_inputs(base_ref, adapter),
                      kind="apply") as staged:
        total_bytes = sum(t.nbytes for t in plan)
        check_free_space(staged.path, total_bytes)
        reader = open_reader(base_ref, progress)
        try:
            writer = ShardedWriter(staged.path, plan, shard_bytes)
            with threads_restored():
                counts = _stream(reader, adapter, plan, writer, device, settings.threads, progress)
            _write_model_files(reader.folder, staged.path, out_dtype, settings, base_headers.quantization)
        finally:
            reader.close()
        output = staged.commit(progress)
    progress.log(f"Wrote {output}: {counts['changed']} tensors changed, {counts['replaced']} replaced.")
    return {"output": str(output), "tensors": len(plan), "bytes": total_bytes, **counts}


def _stream(
    base: ModelReader,
    adapter: LoraAdapter,
    plan: list[PlannedTensor],
    writer: ShardedWriter,
    device: torch.device,
    threads: ThreadPolicy,
    progress: Progress,
) -> dict[str, int]:
    counts = {"changed": 0, "replaced": 0}
    works = [_tensor_work(adapter, planned) for planned in plan]
    progress.start_stage("Applying the adapter", total=len(plan), bytes_total=sum(t.nbytes for t in plan),
                         work_total=sum(works))
    try:
        for planned, work in zip(plan, works, strict=True):
            tensor = base.read(planned.name)
            replacement = adapter.replacement_for(planned.name)
            # B·A is compute-bound; adding it, casting and writing are bound by memory: one thread.
            use_cpu_threads(threads.threads_for(WorkKind.DENSE))
            delta = adapter.delta_for(planned.name, planned.shape, device) if replacement is None else None
            use_cpu_threads(1)
            if replacement is not None:
                tensor = replacement
                counts["replaced"] += 1
            elif delta is not None:
                tensor = adapter.added(planned.name, tensor.to(device), delta)
                if not bool(torch.isfinite(tensor).all()):
                    raise NonFiniteResultError(
                        f"{planned.name} contains NaN or infinity after the adapter was applied.",
                        hint=say("Lower {scale}, or check the adapter: its weights may be damaged."),
                    )
                counts["changed"] += 1
            writer.write(planned.name, tensor.to(planned.dtype))
            progress.step(planned.name, nbytes=planned.nbytes, work=work)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return counts


# An updated tensor's extra cost, in bytes of a tensor copied as it is, per entry: the float32 update B·A, the
# base in float32, their sum checked and cast back (2.3–3.4 times a bfloat16 copy's time per byte in
# benchmarks/estimates.py; the product itself is small at LoRA ranks).
_UPDATE_WORK_PER_ELEMENT = 4


def _tensor_work(adapter: LoraAdapter, planned: PlannedTensor) -> int:
    """What writing `planned` costs, as the bar and its time left count it: its bytes, and its update's work
    where the adapter adds one (not where it replaces the tensor whole)."""
    updated = adapter.replacement_for(planned.name) is None and adapter.applied_dtype(planned.name) is not None
    return planned.nbytes + (_UPDATE_WORK_PER_ELEMENT * math.prod(planned.shape) if updated else 0)


def _write_model_files(base_folder: Path, out: Path, out_dtype: torch.dtype | None, settings: ApplySettings,
                       quantization: Quantization | None) -> None:
    config_path = base_folder / "config.json"
    if config_path.exists():
        config = read_model_config(config_path)
        config.pop("quantization_config", None)  # a quantized base was read dequantized: the output is not quantized
        if out_dtype is not None:
            config["torch_dtype"] = dtype_name(out_dtype)
            if "dtype" in config:
                config["dtype"] = dtype_name(out_dtype)
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    copy_companion_files(out, base_folder, base_folder)
    scale = f" at scale {settings.scale:g}" if settings.scale != 1 else ""
    (out / "README.md").write_text(
        "---\nlibrary_name: transformers\ntags:\n- mergesmith\n- lora-applied\n---\n\n"
        f"# {Path(settings.out).name}\n\n"  # `out` is the staging folder: the card is titled with the result's name
        f"The base model {settings.base}{dequantized_from(quantization)} with the LoRA adapter {settings.adapter} "
        f"applied{scale} by Mergesmith.\n"
    )


def _out_dtype(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    try:
        return dtype_from_name(name)
    except ValueError as error:
        raise SettingsError(str(error), hint="Use bfloat16, float16 or float32.", key="dtype") from None


