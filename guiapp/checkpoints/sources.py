"""Where a job's models come from: headers for planning, and tensor readers for running.

A model reference is a local folder or a Hub id. Planning needs only headers (for a Hub model that is not
downloaded yet, read over HTTP range requests), so every problem is found before a download starts; running
needs the files, fetched into the standard Hugging Face cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.adapters import LoraAdapter, open_adapter
from guiapp.checkpoints.quantized.layout import Quantization
from guiapp.checkpoints.quantized.registry import quantized_layout
from guiapp.checkpoints.reading import Checkpoint, TensorInfo, open_checkpoint, tensor_info
from guiapp.errors import CheckpointError
from guiapp.hub.header_cache import cached_headers, folder_version
from guiapp.hub.references import ModelRef
from guiapp.progress import Progress


@dataclass
class ModelHeaders:
    """What the plan needs to know about one model: its tensors (from headers) and its config."""

    ref: ModelRef
    tensors: dict[str, TensorInfo]
    config: dict[str, Any] | None
    # The tensors a `model+adapter` reference's adapter changes, with the dtype they have once it is applied.
    applied: dict[str, torch.dtype] = field(default_factory=dict)
    # How a quantized model's weights were stored (its `tensors` are the dequantized ones); None for the others.
    quantization: Quantization | None = None

    @property
    def label(self) -> str:
        return str(self.ref)

    def read_dtype(self, name: str) -> torch.dtype:
        """The dtype the merge reads tensor `name` in: as stored, or as the model's adapter yields it."""
        return self.applied.get(name, self.tensors[name].dtype)


def read_headers(ref: ModelRef) -> ModelHeaders:
    """Names, shapes, dtypes and config of `ref`'s model, reading no tensor data.

    Raises CheckpointError for a missing or damaged local model, HubError subclasses for Hub problems.
    """
    folder = ref.existing_folder()
    if folder is None:
        from guiapp.hub.resolve import read_model_metadata  # noqa: PLC0415 - huggingface_hub loads for Hub models only

        metadata = read_model_metadata(ref)  # cached per commit
        stored = {name: tensor_info(record, str(ref)) for name, record in metadata.tensors.items()}
        tensors, config, quantization = _dequantized(stored, metadata.config, str(ref))
        headers = ModelHeaders(ref, tensors, config, quantization=quantization)
    else:
        tensors, config, quantization = cached_headers(("folder", folder, _folder_version(folder)),
                                                       lambda: _read_folder(folder))
        headers = ModelHeaders(ref, tensors, config, quantization=quantization)
    if ref.adapter:
        adapter = _open_adapter(ref, headers.tensors)
        headers.applied = {name: dtype for name in headers.tensors if (dtype := adapter.applied_dtype(name))}
    return headers


def _read_folder(folder: Path) -> tuple[dict[str, TensorInfo], dict | None, Quantization | None]:
    with open_checkpoint(folder) as checkpoint:
        quantization = checkpoint.quantized.facts(checkpoint.stored) if checkpoint.quantized else None
        return checkpoint.tensors, checkpoint.config, quantization


def _dequantized(stored: dict[str, TensorInfo], config: dict | None, label: str) -> tuple:
    """(tensors, config, quantization) of a model known by its headers alone: a quantized one's dequantized
    weights, its config without the quantization settings. Raises as `quantized_layout` (read=None)."""
    layout = quantized_layout(stored, config, label, None)
    if layout is None:
        return stored, config, None
    config = {key: value for key, value in (config or {}).items() if key != "quantization_config"}
    return layout.logical(stored), config, layout.facts(stored)


def _folder_version(folder: Path) -> tuple:
    """The identity of the files a folder's headers come from (weights, indexes, config)."""
    try:
        names = [p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".json")]
        return folder_version(folder, names)
    except OSError as error:
        raise CheckpointError(f"The model folder {folder} cannot be read: {error.strerror or error}.") from None


@dataclass
class ModelReader:
    """Reads one input model's tensors (as stored) during a job, with its LoRA adapter applied if it has one."""

    ref: ModelRef
    folder: Path
    checkpoint: Checkpoint
    adapter: object | None = None

    def read(self, name: str) -> torch.Tensor:
        tensor = self.checkpoint.read(name)
        if self.adapter is None:
            return tensor
        return self.adapter.apply_to(name, tensor)

    def read_rows(self, name: str, rows: range) -> torch.Tensor:
        """The rows `rows` of tensor `name` as stored, reading only those. For a model without an adapter (an
        adapter changes whole tensors: read those with `read`). Raises CheckpointError as `Checkpoint.read_rows`."""
        if self.adapter is not None:
            raise RuntimeError(f"internal error: rows of {name} read from a model with an adapter")
        return self.checkpoint.read_rows(name, rows)

    def warm(self, name: str, scratch: memoryview, stop: Callable[[], bool]) -> None:
        """Bring the stored bytes of tensor `name` into the system's page cache (`Checkpoint.warm`); never raises."""
        self.checkpoint.warm(name, scratch, stop)

    def close(self) -> None:
        self.checkpoint.close()


def open_reader(ref: ModelRef, progress: Progress | None = None) -> ModelReader:
    """Open `ref` for reading, downloading it into the Hugging Face cache first if it is a Hub model.

    The one-model case of `open_readers`, with its errors.
    """
    return open_readers([ref], progress)[0]


def open_readers(refs: Sequence[ModelRef], progress: Progress | None = None) -> list[ModelReader]:
    """Open each of `refs` (and its adapter) for reading, in order. The Hub models among them are downloaded first,
    all in one "Downloading" stage whose bar counts every file of every model from the start.

    Raises CheckpointError / HubError subclasses when a model cannot be had (none is left open).
    """
    from guiapp.hub.resolve import resolve_models  # noqa: PLC0415 - a local folder is returned as it is

    adapters = [ref.adapter for ref in refs if ref.adapter]
    folders = resolve_models([ref.base for ref in refs] + adapters, progress=progress)
    adapter_folders = iter(folders[len(refs):])
    readers: list[ModelReader] = []
    try:
        for ref, folder in zip(refs, folders, strict=False):
            checkpoint = open_checkpoint(folder)
            readers.append(ModelReader(ref, folder, checkpoint))
            if ref.adapter:
                adapter = LoraAdapter.open(next(adapter_folders))
                adapter.check_base(checkpoint.tensors, str(ref.base))
                readers[-1].adapter = adapter
    except BaseException:
        for reader in readers:
            reader.close()
        raise
    return readers


def _open_adapter(ref: ModelRef, base_tensors: dict[str, TensorInfo], progress: Progress | None = None):
    """Open the LoRA adapter of a `model+adapter` reference, checked against the model's tensors."""

    adapter = open_adapter(ref.adapter, progress=progress)
    adapter.check_base(base_tensors, str(ref.base))
    return adapter
