"""Writing a model as one GGUF file, streamed: tensor by tensor, block of rows by block of rows.

The plan comes from the headers alone (names, shapes, config, tokenizer), so an architecture or tokenizer that
cannot be exported is refused before anything is written, and `--dry-run` predicts the file's size exactly up
to the tokenizer of a Hub model not yet downloaded. The GGUF header (metadata and tensor table) is written
first, then each tensor's blocks of rows are read from the checkpoint, turned into float32 by torch (but for
bfloat16 rows of a type the compiled K-quants make: they widen them as they go), changed as llama.cpp expects (q/k
permuted, Gemma's norms) and quantized, and written behind: memory holds one block of rows, whatever the model's
size. The file is written inside a hidden staging folder beside the destination
and renamed into place only when complete, so a failed or cancelled export leaves no `.gguf` behind.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
import torch

from guiapp import __version__
from guiapp.checkpoints.output_guard import (
    DestinationLock,
    absolute_destination,
    check_output_location,
    clean_leftovers,
    done_with,
    mark_in_use,
    new_folder_remedy,
    rename_noreplace,
    staging_name,
)
from guiapp.checkpoints.sources import ModelHeaders, ModelReader, open_reader, read_headers
from guiapp.checkpoints.writing import check_free_space
from guiapp.compute.devices import threads_restored, use_cpu_threads
from guiapp.errors import InsufficientResourcesError, OutputError
from guiapp.gguf.architectures import PlannedTensor, Source, plan_tensors, source_of, write_metadata
from guiapp.gguf.blocks import quantizing_threads
from guiapp.gguf.provenance import MadeFrom, made_from, write_made_from
from guiapp.gguf.quantize import (
    FILE_KINDS,
    FileKind,
    encode,
    k_quant_maker,
    reads_bfloat16,
    seconds_per_value,
    stored_bytes,
    tensor_type,
)
from guiapp.gguf.tokenizer import Vocabulary, loadable_name, read_vocabulary, write_vocabulary
from guiapp.hub.references import ModelRef
from guiapp.progress import Progress
from guiapp.system.threads import ThreadPolicy, WorkKind
from guiapp.system.units import three_digits

# Rows are read, converted and quantized in blocks of about this many float32 bytes (16 MB: peak private memory
# 400-510 MB whatever the model's size, and faster than 32 MB blocks in benchmarks/gguf_export.py).
BLOCK_BYTES = 16 * 1024 * 1024
# Seconds per element converted to float32 on one thread, and bytes per second read and written, for the time
# estimate (measured by benchmarks/gguf_export.py on a 2-core workstation; a rough guide, not a promise).
_CONVERT_SECONDS_PER_ELEMENT = 2e-9
_DISK_BYTES_PER_SECOND = 400e6
# Metadata bytes per token when the tokenizer is not here to count (a Hub model before its download):
_METADATA_BYTES_PER_TOKEN = 32  # a token (~15), its type (4) and a merge (~15)


@dataclass
class ExportPlan:
    """What an export will write: every tensor with its stored type, and the predicted file size."""

    label: str
    name: str  # general.name: the model's folder or repo name
    source: Source
    kind: FileKind
    tensors: list[PlannedTensor]
    types: list[gguf.GGMLQuantizationType]
    header_bytes: int  # exact when `vocabulary` was read, estimated otherwise
    read_bytes: int
    vocabulary: Vocabulary | None
    made_from: MadeFrom  # recorded in the file for its model card

    @property
    def file_bytes(self) -> int:
        return self.header_bytes + sum(_padded(stored_bytes(t.shape, q)) for t, q in zip(self.tensors, self.types,
                                                                                       strict=True))

    def seconds(self, threads: int = 1) -> float:
        """A rough duration: reading, converting, quantizing on `threads` threads and writing."""
        work = 0.0
        for tensor, qtype in zip(self.tensors, self.types, strict=True):
            elements = _elements(tensor.shape)
            work += elements * (_CONVERT_SECONDS_PER_ELEMENT + seconds_per_value(qtype) / threads)
        return work + (self.read_bytes + self.file_bytes) / _DISK_BYTES_PER_SECOND

    def as_kind(self, kind: FileKind) -> ExportPlan:
        """The same plan written as `kind` (the header's size does not depend on the kind)."""
        tied = not any(t.name == "output.weight" for t in self.tensors)
        types = [tensor_type(kind, t.name, t.shape, self.source.layers, tied) for t in self.tensors]
        return replace(self, kind=kind, types=types)

    def sizes(self) -> dict[str, int]:
        """The predicted file size of every kind of file for this model, by kind name."""
        return {name: self.as_kind(kind).file_bytes for name, kind in FILE_KINDS.items()}

    def type_counts(self) -> dict[str, int]:
        """How many tensors get each stored type ("Q4_K": 98, ...)."""
        counts: dict[str, int] = {}
        for qtype in self.types:
            counts[qtype.name] = counts.get(qtype.name, 0) + 1
        return counts


def plan_export(headers: ModelHeaders, kind: FileKind, folder: Path | None) -> ExportPlan:
    """The plan for writing the model of `headers` as `kind`; the tokenizer is read from `folder` when the model
    is here (None: a Hub model not yet downloaded, whose header size is then estimated).

    Raises UnsupportedModelError for an architecture, tensor or tokenizer that cannot be exported, and
    CheckpointError for a missing or damaged tokenizer.
    """
    label = str(headers.ref)
    source = source_of(headers.config, label)
    shapes = {name: tuple(info.shape) for name, info in headers.tensors.items()}
    tensors = plan_tensors(source, shapes, label)
    tied = not any(t.name == "output.weight" for t in tensors)
    types = [tensor_type(kind, t.name, t.shape, source.layers, tied) for t in tensors]
    rows = next(t.shape[0] for t in tensors if t.name == "token_embd.weight")
    vocabulary = read_vocabulary(folder, rows, label) if folder is not None else None
    record = made_from(headers.ref, folder)
    writer = _writer(None, source, kind, tensors, types, vocabulary, headers.ref.short_name, record)
    header = _header_bytes(writer) if vocabulary is not None else \
        _header_bytes(writer) + rows * _METADATA_BYTES_PER_TOKEN
    read_bytes = sum(headers.tensors[t.source].nbytes for t in tensors if t.source is not None)
    return ExportPlan(label, headers.ref.short_name, source, kind, tensors, types, header, read_bytes, vocabulary,
                      record)


def predicted_sizes(headers: ModelHeaders, folder: Path | None) -> dict[str, int]:
    """The predicted file size of every kind of file for this model, by kind name (see `plan_export`)."""
    return plan_export(headers, FILE_KINDS["f16"], folder).sizes()


def _elements(shape: tuple[int, ...]) -> int:
    count = 1
    for dimension in shape:
        count *= dimension
    return count


def _padded(size: int) -> int:
    return gguf.GGUFWriter.ggml_pad(size, gguf.GGUF_DEFAULT_ALIGNMENT)


def _writer(path: Path | None, source: Source, kind: FileKind, tensors: list[PlannedTensor],
            types: list[gguf.GGMLQuantizationType], vocabulary: Vocabulary | None, name: str,
            record: MadeFrom) -> gguf.GGUFWriter:
    """A GGUF writer holding the file's metadata and tensor table (nothing written yet)."""
    writer = gguf.GGUFWriter(path, source.arch_name)
    write_metadata(writer, source, loadable_name(name, vocabulary))
    write_made_from(writer, record, __version__)
    writer.add_file_type(int(kind.file_type))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if vocabulary is not None:
        write_vocabulary(writer, vocabulary)
    for tensor, qtype in zip(tensors, types, strict=True):
        # Element shape with the stored type: the writer keeps the shape as given (a uint8 dtype would mean bytes).
        writer.add_tensor_info(tensor.name, tensor.shape, np.dtype(np.float32), stored_bytes(tensor.shape, qtype),
                               raw_dtype=qtype)
    return writer


def _header_bytes(writer: gguf.GGUFWriter) -> int:
    """The bytes the header, metadata and tensor table take in the file, padded as the format asks (counted from
    the format's layout rather than packed: a vocabulary's hundreds of thousands of strings pack slowly)."""
    size = 4 + 4 + 8 + 8
    for key, value in writer.kv_data[0].items():
        size += 8 + len(key.encode()) + 4 + _value_bytes(value.value, value.type, value.sub_type)
    for name, info in writer.tensors[0].items():
        size += 8 + len(name.encode()) + 4 + 8 * len(info.shape) + 4 + 8
    return _padded(size)


_SCALAR_BYTES = {gguf.GGUFValueType.UINT8: 1, gguf.GGUFValueType.INT8: 1, gguf.GGUFValueType.BOOL: 1,
                 gguf.GGUFValueType.UINT16: 2, gguf.GGUFValueType.INT16: 2, gguf.GGUFValueType.UINT32: 4,
                 gguf.GGUFValueType.INT32: 4, gguf.GGUFValueType.FLOAT32: 4, gguf.GGUFValueType.UINT64: 8,
                 gguf.GGUFValueType.INT64: 8, gguf.GGUFValueType.FLOAT64: 8}


def _value_bytes(value, kind: gguf.GGUFValueType, sub_kind: gguf.GGUFValueType | None) -> int:
    """The bytes of one metadata value after its type tag (GGUF v3: strings and arrays carry 64-bit lengths)."""
    if kind == gguf.GGUFValueType.STRING:
        return 8 + len(value.encode() if isinstance(value, str) else value)
    if kind == gguf.GGUFValueType.ARRAY:
        sub_kind = sub_kind or gguf.GGUFValueType.get_type(value[0])
        if sub_kind == gguf.GGUFValueType.STRING:
            return 4 + 8 + sum(8 + len(item.encode() if isinstance(item, str) else item) for item in value)
        return 4 + 8 + len(value) * _SCALAR_BYTES[sub_kind]
    return _SCALAR_BYTES[kind]


@dataclass
class ExportResult:
    path: Path
    bytes: int
    predicted_bytes: int
    seconds: float
    type_counts: dict[str, int]
    k_quants: str | None  # what made the K-quant blocks (quantize.k_quant_maker), None without any


def export_gguf(model: str, destination: Path | str, kind_name: str, progress: Progress | None = None,
                threads: ThreadPolicy | None = None) -> ExportResult:
    """Write `model` (a folder, a Hub id or BASE+ADAPTER) as the GGUF file `destination`, of kind `kind_name`.

    `kind_name` is one of FILE_KINDS (callers check it). Raises UnsupportedModelError / CheckpointError before
    writing anything when the model cannot be exported, OutputError when the destination exists or is inside an
    input, InsufficientResourcesError when the disk is or becomes too full, JobCancelled when cancelled (no file
    is left behind in any of these cases).
    """
    progress = progress or Progress()
    threads = threads or ThreadPolicy()
    kind = FILE_KINDS[kind_name.lower()]
    started = time.monotonic()
    ref = ModelRef.parse(model)
    headers = read_headers(ref)
    source_of(headers.config, str(ref))  # an unknown architecture is refused before any download
    path = check_destination(destination, ref)
    reader = open_reader(ref, progress)
    try:
        plan = plan_export(headers, kind, reader.folder)
        check_free_space(path.parent, plan.file_bytes)
        with threads_restored():
            # Conversions to float32 are elementwise (one thread); quantization takes the threads of `encode`.
            use_cpu_threads(threads.threads_for(WorkKind.ELEMENTWISE))
            written = _write_staged(path, plan, reader, progress, threads)
    finally:
        reader.close()
    progress.log(f"Wrote {path} ({written} bytes, predicted {plan.file_bytes}).")
    return ExportResult(path, written, plan.file_bytes, time.monotonic() - started, plan.type_counts(),
                        k_quant_maker(plan.types))


def check_destination(destination: Path | str, ref: ModelRef) -> Path:
    """The absolute path of a new GGUF file at `destination`. Raises OutputError when something is there
    already, or the place is inside an input model, its adapter or the Hugging Face cache."""
    path = absolute_destination(destination)
    if os.path.lexists(path):
        number = 2
        while os.path.lexists(path.with_name(suggestion := f"{path.stem}-{number}{path.suffix}")):
            number += 1
        raise OutputError(f"{path} already exists.",
                          why="Mergesmith never writes over an existing file, so nothing there is lost.",
                          hint=f"Choose a new name, such as {suggestion}, or move the existing file away.",
                          remedy=new_folder_remedy(path.with_name(suggestion)))
    inputs = [folder for folder in (ref.base.existing_folder(),
                                    ref.adapter.existing_folder("adapter") if ref.adapter else None) if folder]
    check_output_location(path, inputs, replace=False)
    return path


def _write_staged(path: Path, plan: ExportPlan, reader: ModelReader, progress: Progress,
                  threads: ThreadPolicy) -> int:
    """Write the file inside a hidden staging folder beside `path`, then rename it into place. Returns its size."""
    parent = path.parent
    clean_leftovers(parent)
    lock = DestinationLock(path)
    lock.acquire()
    staging = staging_name(path, "partial")
    mark_in_use(staging)
    try:
        staging.mkdir()
        partial = staging / path.name
        _write_file(partial, plan, reader, progress, threads)
        size = partial.stat().st_size
        try:
            rename_noreplace(partial, path)
        except FileExistsError:
            raise OutputError(f"{path} appeared while the export ran; it was left as it is.",
                              hint="Export again under another name.") from None
        return size
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InsufficientResourcesError(
                f"The disk holding {parent} filled up while the GGUF file was being written.",
                hint="Free some space or choose a folder on another disk; the partial file was removed.") from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        done_with(staging)
        lock.release()


def _write_file(partial: Path, plan: ExportPlan, reader: ModelReader, progress: Progress,
                threads: ThreadPolicy) -> None:
    """Header first, then the tensors' blocks: the next block is read and converted on one thread and the last
    one written on another while the current one is quantized (on threads kept for the whole file), so at most
    three blocks are held."""
    writer = _writer(partial, plan.source, plan.kind, plan.tensors, plan.types, plan.vocabulary, plan.name,
                     plan.made_from)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        stream = writer.fout[0]
        writer.write_padding(stream, stream.tell())  # every tensor's data then starts and ends aligned
        progress.start_stage("Exporting to GGUF", total=len(plan.tensors), bytes_total=plan.read_bytes)
        written = [0] * len(plan.tensors)
        with ThreadPoolExecutor(1, "mergesmith-read", initializer=use_cpu_threads, initargs=(1,)) as reads, \
                ThreadPoolExecutor(1, "mergesmith-write") as writes, quantizing_threads(threads.most) as quantizers:
            pending: Future | None = None
            for index, block, nbytes, last in _read_ahead(_all_blocks(plan, reader), reads):
                tensor, qtype = plan.tensors[index], plan.types[index]
                data = encode(block, qtype, threads.threads_for(WorkKind.DENSE), quantizers)
                written[index] += data.nbytes
                padding = b""
                if last:
                    planned = stored_bytes(tensor.shape, qtype)
                    if written[index] != planned:
                        raise RuntimeError(f"internal error: {tensor.name} took {written[index]} bytes, planned "
                                           f"{planned}")
                    padding = bytes(_padded(planned) - planned)
                if pending is not None:
                    pending.result()
                pending = writes.submit(_write_parts, stream, data, padding)
                progress.step(tensor.name, units=1 if last else 0, nbytes=nbytes)
            if pending is not None:
                pending.result()
        stream.flush()
        os.fsync(stream.fileno())
    finally:
        writer.close()


def _write_parts(stream, data: np.ndarray, padding: bytes) -> None:
    stream.write(memoryview(np.ascontiguousarray(data)))
    if padding:
        stream.write(padding)


def _read_ahead(items: Iterator, pool: ThreadPoolExecutor) -> Iterator:
    """The items of `items`, each next one made on `pool` while the caller works on the current one."""
    end = object()
    pending = pool.submit(next, items, end)
    while (item := pending.result()) is not end:
        pending = pool.submit(next, items, end)
        yield item


def _all_blocks(plan: ExportPlan, reader: ModelReader) -> Iterator[tuple[int, torch.Tensor, int, bool]]:
    """(tensor index, block of its rows, bytes read for it, whether it is the tensor's last block)."""
    for index, tensor in enumerate(plan.tensors):
        blocks = list(_block_rows(tensor, reader))
        whole = reader.read(tensor.source) if tensor.source and (reader.adapter is not None or len(blocks) == 1) \
            else None
        for number, (first, stop) in enumerate(blocks):
            block, nbytes = _read_block(tensor, reader, first, stop, whole, plan.types[index])
            yield index, block, nbytes, number == len(blocks) - 1


def _block_rows(tensor: PlannedTensor, reader: ModelReader) -> Iterator[tuple[int, int]]:
    """The (first, stop) rows of each block of `tensor`: about BLOCK_BYTES of float32, whole heads for q/k."""
    rows = tensor.shape[0] if len(tensor.shape) > 1 else 1
    row_bytes = _elements(tensor.shape[1:]) * 4 if len(tensor.shape) > 1 else 0
    step = max(1, BLOCK_BYTES // row_bytes) if row_bytes else rows
    step = max(tensor.row_multiple, step // tensor.row_multiple * tensor.row_multiple)
    if tensor.values is not None or reader.adapter is not None:  # computed, or changed whole by the adapter
        step = rows
    for first in range(0, rows, step):
        yield first, min(rows, first + step)


def _read_block(tensor: PlannedTensor, reader: ModelReader, first: int, stop: int, whole: torch.Tensor | None,
                qtype: gguf.GGMLQuantizationType) -> tuple[torch.Tensor, int]:
    """Rows first..stop of `tensor` in float32 (bfloat16 ones as they are where the kernel of `qtype` reads them:
    the compiled K-quants widen them as they go), changed as planned, and the bytes read for them."""
    if tensor.values is not None:
        return tensor.values.to(torch.float32), 0
    info = reader.checkpoint.tensors[tensor.source]
    if whole is not None:
        block = whole if len(tensor.shape) < 2 else whole[first:stop]
    else:
        block = reader.read_rows(tensor.source, range(first, stop))
    if not (block.dtype == torch.bfloat16 and reads_bfloat16(qtype)):
        block = block.to(torch.float32)
    if tensor.transform is not None:
        block = tensor.transform(block, first)
    rows = tensor.shape[0] if len(tensor.shape) > 1 else 1
    return block, info.nbytes * (stop - first) // rows


def dry_run(model: str, destination: Path | str, kind_name: str) -> dict:
    """What `export-gguf --dry-run` reports, reading headers only (and the tokenizer of a local model): the
    plan, the predicted size of every kind of file and the time estimate. Nothing is written or downloaded.

    Raises what `plan_export` and `check_destination` raise.
    """
    ref = ModelRef.parse(model)
    headers = read_headers(ref)
    folder = ref.base.existing_folder()
    plan = plan_export(headers, FILE_KINDS[kind_name.lower()], folder)
    path = check_destination(destination, ref)
    sizes = plan.sizes()
    config = plan.source.config
    vocabulary = plan.vocabulary
    return {
        "model": str(ref), "output": str(path), "type": plan.kind.name, "architecture": plan.source.arch_name,
        "tensors": len(plan.tensors), "tensor_types": plan.type_counts(), "reads_bytes": plan.read_bytes,
        "context_length": config.get("max_position_embeddings"), "rope_theta": plan.source.rope().get("rope_theta"),
        "tokenizer": f"{vocabulary.model} ({vocabulary.pre})" if vocabulary else "read after the download",
        "predicted_bytes": plan.file_bytes, "sizes": sizes, "header_exact": vocabulary is not None,
        "seconds": plan.seconds(ThreadPolicy().threads_for(WorkKind.DENSE)),
    }


def format_dry_run(report: dict) -> str:
    """`dry_run`'s report as the lines the CLI prints."""
    from guiapp.system.units import format_seconds  # noqa: PLC0415 - units is tiny; kept beside its one use

    types = ", ".join(f"{count} {name}" for name, count in sorted(report["tensor_types"].items()))
    lines = [f"Model:         {report['model']} ({report['architecture']}, {report['tensors']} tensors: {types})",
             f"Output:        {report['output']} ({report['type']}, {three_digits(report['predicted_bytes'])})",
             f"Settings:      context {report['context_length']}, rope theta {report['rope_theta']}, tokenizer "
             f"{report['tokenizer']}",
             "Sizes:         " + "\n               ".join(
                 f"{name:<7} {three_digits(size):>9}  {FILE_KINDS[name].words}"
                 for name, size in report["sizes"].items()),
             f"Estimate:      {'about ' if report['seconds'] >= 1 else ''}{format_seconds(report['seconds'])} "
             f"(reads {three_digits(report['reads_bytes'])})",
             "Nothing was written (--dry-run)."]
    return "\n".join(lines)
