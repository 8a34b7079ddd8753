"""Reading model checkpoints tensor by tensor.

A model folder holds `model.safetensors`, shards listed in `model.safetensors.index.json`, or (old format)
`pytorch_model*.bin`. Names, shapes and dtypes come from the headers alone; tensors are read one at a time with
positional reads (see `weight_file`), so reading a 15 GB model costs a few tensors of memory and a file cut
short by another program is an error, not a crash. Only regular files are opened (`system.bounded`). `.bin` files are unpickled only with
`weights_only=True`: a file that holds code is refused, never run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from guiapp.checkpoints.quantized.layout import QuantizedLayout
from guiapp.checkpoints.quantized.registry import quantized_layout
from guiapp.checkpoints.weight_file import SafetensorsFile, changed_file_error, file_identity
from guiapp.errors import CheckpointError, UnsafeCheckpointError
from guiapp.facts.dtypes import BY_CODE, writable_name
from guiapp.facts.wording import say
from guiapp.hub.headers import (
    REDOWNLOAD_HINT,
    TensorRecord,
    check_layer_indices,
    describe_non_safetensors,
    index_shards,
    read_safetensors_header,
)
from guiapp.hub.model_config import CONFIG_FILE, read_model_config
from guiapp.system.bounded import INDEX_JSON_BYTES, JSON_BYTES, describe_value, load_json_limited, open_regular_file

# Torch dtypes of the safetensors codes Mergesmith computes with, derived from the one dtype table.
SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    code: getattr(torch, dtype.name) for code, dtype in BY_CODE.items() if dtype.readable
}
SAFETENSORS_CODES: dict[torch.dtype, str] = {dtype: code for code, dtype in SAFETENSORS_DTYPES.items()}


@dataclass(frozen=True)
class TensorInfo:
    """What a header says about one tensor: enough to plan a job without reading any data."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    file: str
    # Where the data lies after the header (safetensors files only; pickles are read whole).
    data_offsets: tuple[int, int] | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


def dtype_from_name(name: str) -> torch.dtype:
    """The torch dtype of a writable dtype's name or alias ("bfloat16", "bf16", "torch.float16", "double"…, from
    `facts.dtypes`); raises ValueError, worded for a user, for anything else."""
    return getattr(torch, writable_name(name))


def tensor_info(record: TensorRecord, model_label: str) -> TensorInfo:
    """The engine's view of a header record (a local file's or a Hub file's alike).

    Raises CheckpointError when the tensor's dtype is one Mergesmith cannot compute with (the packed unsigned
    integers of quantized checkpoints).
    """
    dtype = SAFETENSORS_DTYPES.get(record.dtype)
    if dtype is None:
        raise CheckpointError(
            f'Tensor "{record.name}" of {model_label} ({record.file}) is stored as {record.dtype} '
            f"({BY_CODE[record.dtype].kind}), which Mergesmith cannot compute with.",
            why="Unsigned 16/32/64-bit tensors and 8-bit scale factors hold packed weights of quantized "
            "checkpoints (GPTQ, AWQ, MXFP4…), not numbers that can be averaged.",
            hint="Mergesmith merges float, integer and bool tensors: use the model's unquantized original "
            "(usually named on its model card) instead of a quantized version.",
        )
    return TensorInfo(record.name, record.shape, dtype, record.file, record.data_offsets)


class Checkpoint:
    """A model folder opened for reading. Use `tensors` for the plan and `read(name)` for the data.

    Raises CheckpointError (or UnsafeCheckpointError) when opened if a weight file is missing, damaged, or holds
    code. Close it (or use it as a context manager) to release the open files.
    """

    def __init__(self, folder: Path, tensors: dict[str, TensorInfo], files: dict[str, SafetensorsFile] | None = None):
        self.folder = folder
        self.tensors = tensors
        # The tensors as the files hold them; `tensors` differs for a quantized model (its dequantized weights).
        self.stored = tensors
        self.quantized: QuantizedLayout | None = None
        self._files = files or {}
        self._pickled: dict[str, tuple[dict[str, torch.Tensor], tuple[int, int]]] = {}

    @cached_property
    def config(self) -> dict[str, Any] | None:
        """The folder's config.json, or None when there is none. Raises CheckpointError if it is not JSON, and
        ModelConfigError if a field has a value of the wrong kind (`read_model_config`)."""
        path = self.folder / CONFIG_FILE
        return read_model_config(path) if path.exists() else None

    def dequantize_on_read(self) -> None:
        """Present a quantized model as its dequantized weights (`tensors`, `read`), the quantization settings
        left out of `config`. Raises UnknownQuantizationError / QuantizedCheckpointError (see `quantized_layout`)."""
        try:
            config = self.config
        except CheckpointError:  # reported where the config is used; the side tensors alone still tell the format
            config = None
        self.quantized = quantized_layout(self.stored, config, str(self.folder), self._read_stored)
        if self.quantized is not None:
            self.tensors = self.quantized.logical(self.stored)
            if config is not None:
                config.pop("quantization_config", None)

    @property
    def total_bytes(self) -> int:
        return sum(info.nbytes for info in self.tensors.values())

    def read(self, name: str) -> torch.Tensor:
        """The tensor `name` as stored (dtype unchanged), on the CPU.

        Raises CheckpointError when its file was changed or cut short by another program since it was opened.
        """
        if self.quantized is not None and name in self.quantized.tensors:
            return self.quantized.read(name, self._read_stored)
        return self._read_stored(name)

    def _read_stored(self, name: str) -> torch.Tensor:
        info = self.stored[name]
        if info.file.endswith(".safetensors"):
            return self._files[info.file].read(name, info.data_offsets, info.dtype, info.shape)
        return self._pickled_tensor(name).clone()

    def read_rows(self, name: str, rows: range) -> torch.Tensor:
        """The rows `rows` (consecutive) of the tensor `name` as stored, on the CPU; from a safetensors file only
        their bytes are read (of a quantized weight, the parts those rows are made from). Raises CheckpointError as
        `read` does."""
        if self.quantized is not None and name in self.quantized.tensors:
            return self.quantized.read_rows(name, rows, self._read_stored, self._read_stored_rows)
        return self._read_stored_rows(name, rows)

    def _read_stored_rows(self, name: str, rows: range) -> torch.Tensor:
        info = self.stored[name]
        if info.file.endswith(".safetensors"):
            return self._files[info.file].read_rows(name, info.data_offsets, info.dtype, info.shape, rows)
        return self._pickled_tensor(name)[rows.start : rows.stop].clone()

    def warm(self, name: str, scratch: memoryview, stop: Callable[[], bool]) -> None:
        """Bring the bytes of tensor `name` into the system's page cache (`SafetensorsFile.warm`); a pickle, which
        is loaded whole once, is left alone. Never raises for an unreadable file: the real read reports it."""
        entry = self.quantized.tensors.get(name) if self.quantized is not None else None
        for part in entry.parts if entry is not None else (name,):
            info = self.stored[part]
            if info.file.endswith(".safetensors"):
                self._files[info.file].warm(info.data_offsets, scratch, stop)

    def _pickled_tensor(self, name: str) -> torch.Tensor:
        """The tensor `name` of a pickle, loaded whole once per file. Raises CheckpointError when the file changed."""
        info = self.stored[name]
        path = self.folder / info.file
        if info.file not in self._pickled:
            self._pickled[info.file] = (load_pickle_weights(path), file_identity(path))
        state, identity = self._pickled[info.file]
        if file_identity(path) != identity:  # a zip pickle is memory-mapped: check, then copy out at once
            raise changed_file_error(path, name, "its size or modification time changed")
        return state[name]

    def close(self) -> None:
        for file in self._files.values():
            file.close()
        self._files.clear()
        self._pickled.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_json_object(path: Path, hint: str) -> dict[str, Any]:
    """The JSON object stored in the regular file `path` (at most `JSON_BYTES`).

    Raises CheckpointError naming the file when it is not one, is too large, or is not a regular file.
    """
    document = load_json_limited(path, JSON_BYTES, CheckpointError, what="JSON file", hint=hint)
    if not isinstance(document, dict):
        raise CheckpointError(f"{path} does not hold a JSON object.", hint=hint)
    return document


def open_checkpoint(folder: Path) -> Checkpoint:
    """Open the model folder `folder` and read every weight file's header.

    Raises CheckpointError when the folder has no weights, a shard listed in the index is missing, or a file
    is damaged or is not what its name says; UnsafeCheckpointError for a pickle that holds code.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder.", hint="Choose the folder that holds the model's files.")
    files = _weight_files(folder)
    tensors: dict[str, TensorInfo] = {}
    opened: dict[str, SafetensorsFile] = {}
    try:
        for file in files:
            path = folder / file
            if file.endswith(".safetensors"):
                stream = open_regular_file(path, CheckpointError, what="model file")
                try:
                    records, data_start = read_safetensors_header(stream, os.fstat(stream.fileno()).st_size,
                                                                  str(path), file)
                except BaseException:
                    stream.close()
                    raise
                opened[file] = SafetensorsFile(path, stream, data_start)
                entries = {name: tensor_info(record, str(folder)) for name, record in records.items()}
            else:
                state = load_pickle_weights(path)
                entries = {name: TensorInfo(name, tuple(t.shape), t.dtype, file) for name, t in state.items()}
            for name, info in entries.items():
                if name in tensors:
                    raise CheckpointError(
                        f'Tensor "{name}" appears in both {tensors[name].file} and {file} in {folder}.',
                        hint="The folder mixes files of two models or two formats; keep one set.",
                    )
                tensors[name] = info
    except BaseException:
        for handle in opened.values():
            handle.close()
        raise
    checkpoint = Checkpoint(folder, tensors, opened)
    try:
        checkpoint.dequantize_on_read()
    except BaseException:
        checkpoint.close()
        raise
    return checkpoint


def _weight_files(folder: Path) -> list[str]:
    for index_name, single in (
        ("model.safetensors.index.json", "model.safetensors"),
        ("pytorch_model.bin.index.json", "pytorch_model.bin"),
    ):
        index_path = folder / index_name
        if index_path.exists():
            index = load_json_limited(index_path, INDEX_JSON_BYTES, CheckpointError, what="index file",
                                      hint=REDOWNLOAD_HINT)
            files = index_shards(index, str(index_path))
            missing = [f for f in files if not (folder / f).is_file()]
            if missing:
                raise CheckpointError(
                    f"{folder} is incomplete: {', '.join(missing)} listed in {index_name} is missing.",
                    hint="Download the model again; some of its files never arrived.",
                )
            for file in files:
                if Path(file).is_absolute() or ".." in Path(file).parts:
                    raise CheckpointError(f"{index_path} points outside the model folder ({file}).")
            return files
        if (folder / single).is_file():
            return [single]
    safetensors = sorted(p.name for p in folder.glob("*.safetensors") if p.name != "adapter_model.safetensors")
    if safetensors:
        return safetensors
    bins = sorted(p.name for p in folder.glob("pytorch_model*.bin"))
    if bins:
        return bins
    if (folder / "adapter_config.json").is_file():
        raise CheckpointError(
            f"{folder} is a LoRA adapter, not a full model: its weights change a base model's rather than "
            "replace them.",
            hint=say("Apply it to its base model: {apply_lora}. In a merge recipe, write the model as BASE+{folder} (the "
                 "base, a plus sign, the adapter).", apply_lora=folder, folder=folder),
        )
    raise CheckpointError(
        f"No model weights in {folder} (no .safetensors or pytorch_model*.bin files).",
        hint="Choose the folder that holds the model's weight files.",
    )


def load_pickle_weights(path: Path) -> dict[str, torch.Tensor]:
    """Load a PyTorch pickle checkpoint (zip, or the legacy format before torch 1.6) without running code from it.

    Zip checkpoints are memory-mapped; legacy ones (which cannot be) are read whole. Raises
    UnsafeCheckpointError for a pickle that
    holds code, CheckpointError when the file is not a regular file, is not a checkpoint, or holds anything but
    named tensors (or a tensor named `__metadata__`, which safetensors reserves).
    """
    with open_regular_file(path, CheckpointError, what="model file") as stream:
        head = stream.read(64)
        what = describe_non_safetensors(head)
        if what and ("LFS" in what or "HTML" in what or "JSON" in what):
            raise CheckpointError(f"{path} is {what}.", hint=REDOWNLOAD_HINT)
        stream.seek(0)
        try:
            if head.startswith(b"PK\x03\x04"):
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            else:  # the legacy format (before torch 1.6) cannot be memory-mapped
                state = torch.load(stream, map_location="cpu", weights_only=True)
        except Exception as error:
            raise _unsafe_or_damaged(path, error) from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"{path} does not hold a plain set of named tensors.", hint=_SAFETENSORS_HINT)
    wrong = next((name for name in state if not isinstance(name, str)), None)
    if wrong is not None:
        raise CheckpointError(
            f"{path} does not hold a plain set of named tensors: tensor names must be text, but one is "
            f"{describe_value(wrong)}.",
            hint=_SAFETENSORS_HINT,
        )
    check_layer_indices(state, str(path))
    if "__metadata__" in state:
        raise CheckpointError(
            f'{path} holds a tensor named "__metadata__", a name the safetensors format reserves for its own '
            "header, so the merged model could not be saved as safetensors.",
            hint="Rename that tensor in the checkpoint (or leave it out), or use a safetensors version of the model.",
        )
    return state


_SAFETENSORS_HINT = "Use a safetensors version of this model (most Hub models have one), or convert it yourself."


def _unsafe_or_damaged(path: Path, error: Exception) -> CheckpointError:
    text = str(error)
    if "Weights only load failed" in text or "Unsupported global" in text or "UnpicklingError" in type(error).__name__:
        return UnsafeCheckpointError(
            f"{path} is a Python pickle that holds more than tensors: loading it would run code from the file, "
            "so Mergesmith refused to open it.",
            why="Pickle checkpoints (.bin, .pt) can carry code that runs when they are loaded; Mergesmith loads "
            "them only with torch.load(weights_only=True), which accepts nothing but tensors.",
            hint=_SAFETENSORS_HINT,
        )
    return CheckpointError(f"{path} cannot be read: {text.splitlines()[0] if text else type(error).__name__}.", hint=REDOWNLOAD_HINT)
