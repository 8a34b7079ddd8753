"""GGUF export speed and memory against the disk floor, measured in one run.

    python benchmarks/gguf_export.py [--size-gb 0.5 | --shape 7b] [--types q8_0,f16,q4_k_m] [--repeat 2]
                                     [--keep FOLDER] [--no-llama-cpp]

Builds a Llama-shaped bf16 checkpoint (hidden 2048, vocabulary 32000, as many layers as the size asks), then
for each type prints the wall time of `mergesmith export-gguf` (a process of its own), its peak private
(anonymous) memory, the file's size against the dry run's prediction, and the ratio of the time to the floor:
reading every tensor with safetensors and writing a file of the GGUF's size, measured on the same files in the
same run. Floor and export run --repeat times, alternating, and the fastest of each counts.

Targets (2 CPU cores): q8_0 and f16 within 1.5× the floor, q4_k_m within 3×; the file within 5 % of the
prediction; peak private memory flat in the model's size (a few blocks of rows).

The quantizers' own cost is printed beside them, every tensor typed as the export types it, on all cores, the
tensors already in memory as float32: the export's (`encode`: see guiapp/gguf/quantize.py for which types torch makes) and llama.cpp's
reference code (what `llama-quantize` runs, through libgguf), wall and CPU seconds; and the export's time over the
disk floor plus its quantizer's. The export's CPU seconds (user + system) show how much of both cores it used, and
"stream s" the part of its time spent streaming the tensors into the file (the rest is the command's fixed start:
imports, the tokenizer).
The machine's load average is printed first: on a shared machine the ratios move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from merge import run_measured  # noqa: E402 - the benchmarks folder's shared measuring helper

ROOT = Path(__file__).resolve().parent.parent

_FLOOR = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from safetensors import safe_open
    folder, output, size = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    start = time.perf_counter()
    with open(output, "wb") as stream:
        written = 0
        for file in sorted(folder.glob("*.safetensors")):
            with safe_open(file, framework="pt") as handle:
                for name in handle.keys():
                    data = handle.get_tensor(name).clone()  # copied out of the memory map: really read
                    part = min(size - written, data.numel() * data.element_size())
                    stream.write(data.view(-1).view(__import__("torch").uint8)[:part].numpy().tobytes())
                    written += part
        stream.write(bytes(size - written))
    print(time.perf_counter() - start)
""")


# The export as the user runs it, timed from the command's start (the CLI's entry point imported), and before that
# the time spent streaming the tensors into the file (reading, converting, quantizing, writing); the rest is the
# command's fixed start (imports, the tokenizer).
_EXPORT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[4])
    from guiapp.__main__ import main
    start = time.perf_counter()
    import guiapp.gguf.export as export
    stream = export._write_staged
    def timed(*arguments, **keywords):
        begun = time.perf_counter()
        try:
            return stream(*arguments, **keywords)
        finally:
            timed.seconds = time.perf_counter() - begun
    export._write_staged = timed
    code = main(["export-gguf", sys.argv[1], sys.argv[2], "--type", sys.argv[3]])
    print(timed.seconds)
    print(time.perf_counter() - start)
    sys.exit(code)
""")

_QUANTIZER_ALONE = textwrap.dedent("""
    import os, sys, time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from guiapp.system.memory import configure_heaps
    configure_heaps()  # as the command's process does
    import libgguf, numpy as np
    from safetensors import safe_open
    from guiapp.gguf.blocks import quantizing_threads
    from guiapp.gguf.quantize import FILE_KINDS, encode, tensor_type
    folder, kind, layers = Path(sys.argv[1]), FILE_KINDS[sys.argv[2]], int(sys.argv[3])
    skip = sys.argv[4] == "True"  # --no-llama-cpp: its columns print 0
    threads = os.cpu_count() or 1
    pool = quantizing_threads(threads)  # kept for every tensor, as the export keeps its threads

    def llama_cpp(tensor, qtype):
        if qtype.name in ("F32", "F16", "BF16"):
            return encode(tensor, qtype, threads)  # not quantized: the same conversion as the export's
        native = libgguf.GGMLQuantizationType(int(qtype))
        parts = np.array_split(tensor.reshape(-1, tensor.shape[-1]).numpy(), threads)
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(lambda part: libgguf.quantize_rows(part, native), parts))

    totals = {"export": [0.0, 0.0], "llama.cpp": [0.0, 0.0]}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, framework="pt") as handle:
            for name in handle.keys():
                tensor = handle.get_tensor(name).float()  # read and converted before the clock starts
                qtype = tensor_type(kind, name, tuple(tensor.shape), layers, False)
                for which, quantize in (("export", lambda: encode(tensor, qtype, threads, pool)),
                                        ("llama.cpp", lambda: llama_cpp(tensor, qtype)))[:1 if skip else 2]:
                    wall, cpu = time.perf_counter(), time.process_time()
                    quantize()
                    totals[which][0] += time.perf_counter() - wall
                    totals[which][1] += time.process_time() - cpu
    print(*totals["export"], *totals["llama.cpp"])
""")


SHAPES = {"7b": dict(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, vocab=32000)}  # Llama-2-7B


def build_model(folder: Path, size_gb: float, shape_name: str | None = None) -> tuple[Path, int]:
    import torch

    from guiapp.checkpoints.samples import (
        LlamaShape,
        llama_config,
        llama_tensors,
        write_byte_tokenizer,
        write_checkpoint,
    )

    if shape_name:
        shape = LlamaShape(**SHAPES[shape_name])
        return _write_layer_by_layer(folder / "model", shape), shape.layers
    per_layer = 2 * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 5632)  # bf16 bytes
    outer = 2 * 2 * 32000 * 2048
    layers = max(1, round((size_gb * 1e9 - outer) / per_layer))
    shape = LlamaShape(hidden=2048, intermediate=5632, layers=layers, heads=16, kv_heads=4, vocab=32000)
    tensors = {n: t.to(torch.bfloat16) for n, t in llama_tensors(shape, torch.Generator().manual_seed(0)).items()}
    model = write_checkpoint(folder / "model", tensors, llama_config(shape, torch.bfloat16), shards=2)
    write_byte_tokenizer(model)
    return model, layers


def _write_layer_by_layer(model: Path, shape) -> Path:
    """A bf16 checkpoint of `shape` written a layer per shard (a 7 B model's float32 weights do not fit in memory
    at once), with the tensor names and shapes of guiapp.checkpoints.samples.llama_tensors."""
    import dataclasses

    import torch
    from safetensors.torch import save_file

    from guiapp.checkpoints.samples import llama_config, llama_tensors, write_byte_tokenizer

    model.mkdir(parents=True)
    generator = torch.Generator().manual_seed(0)
    template = llama_tensors(dataclasses.replace(shape, layers=1, vocab=8), generator)
    weight_map: dict[str, str] = {}

    def random_like(name: str) -> torch.Tensor:
        sizes = [shape.vocab if size == 8 else size for size in template[name].shape]
        if name.endswith("norm.weight"):
            return (1 + torch.randn(*sizes, generator=generator) * 0.1).to(torch.bfloat16)
        return (torch.randn(*sizes, generator=generator) * 0.02).to(torch.bfloat16)

    def save(index: int, names: list[str], rename=lambda name: name) -> None:
        file = f"model-{index:05d}.safetensors"
        save_file({rename(name): random_like(name) for name in names}, model / file)
        weight_map.update({rename(name): file for name in names})

    layer_names = [name for name in template if name.startswith("model.layers.0.")]
    save(0, [name for name in template if name not in layer_names])
    for layer in range(shape.layers):
        save(layer + 1, layer_names, lambda name, layer=layer: name.replace("layers.0.", f"layers.{layer}.", 1))
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (model / "config.json").write_text(json.dumps(llama_config(shape, torch.bfloat16)))
    write_byte_tokenizer(model)
    return model


def kept_model(folder: Path, size_gb: float, shape_name: str | None) -> tuple[Path, int]:
    """The model built in `folder` by an earlier run with the same size (its `complete` marker, written last), or
    built there now. Exits when `folder` holds anything else: it is emptied before a build."""
    marker = folder / "complete"
    wanted = f"{shape_name or size_gb}\n"
    if not marker.exists() or marker.read_text() != wanted:
        if folder.exists() and any(folder.iterdir()) and not marker.exists():
            sys.exit(f"{folder} holds files this benchmark did not make; give --keep an empty or new folder.")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        model, layers = build_model(folder, size_gb, shape_name)
        marker.write_text(wanted)
        return model, layers
    model = next(path.parent for path in folder.glob("*/config.json"))
    return model, json.loads((model / "config.json").read_text())["num_hidden_layers"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=0.5)
    parser.add_argument("--shape", choices=sorted(SHAPES), help="a real model's shape instead of --size-gb")
    parser.add_argument("--types", default="q8_0,f16,q4_k_m")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None,
                        help="a folder for the model, built there once and kept for later runs")
    parser.add_argument("--no-llama-cpp", action="store_true",
                        help="leave out llama.cpp's reference quantizer (minutes at 7 B)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="gguf-bench-") as scratch:
        folder = Path(scratch)
        model, layers = kept_model(args.keep, args.size_gb, args.shape) if args.keep else \
            build_model(folder, args.size_gb, args.shape)
        source_bytes = sum(f.stat().st_size for f in model.glob("*.safetensors"))
        print(f"Model: {source_bytes / 1e9:.2f} GB bf16, Llama-shaped; {os.cpu_count()} CPUs; load average "
              f"{' '.join(f'{load:.2f}' for load in os.getloadavg())}\n")
        print(f"{'type':<8} {'export s':>9} {'cpu s':>6} {'stream s':>8} {'floor s':>8} {'ratio':>6} {'target':>6} "
              f"{'quantize s (cpu)':>16} {'llama.cpp s (cpu)':>17} {'to floor+quantize':>17} {'peak MB':>8} "
              f"{'file MB':>8} {'predicted':>9}")
        for kind in args.types.split(","):
            out = folder / f"model-{kind}.gguf"
            dry = subprocess.run([sys.executable, "-m", "guiapp", "export-gguf", str(model), str(out), "--type", kind,
                                  "--dry-run", "--json"], capture_output=True, text=True, env=env, check=True)
            predicted = json.loads(dry.stdout)["predicted_bytes"]
            exports, floors, cpus, streams, peak = [], [], [], [], 0
            for _ in range(args.repeat):
                out.unlink(missing_ok=True)
                before = os.times()
                seconds, memory, printed = run_measured([sys.executable, "-c", _EXPORT, str(model), str(out), kind,
                                                       str(ROOT)])
                streams.append(float(printed.split()[-2]))
                after = os.times()
                cpus.append(after.children_user + after.children_system - before.children_user -
                            before.children_system)
                exports.append(seconds)
                peak = max(peak, memory)
                floor_file = folder / "floor.bin"
                floor_seconds, _, _ = run_measured([sys.executable, "-c", _FLOOR, str(model), str(floor_file),
                                                    str(out.stat().st_size)])
                floor_file.unlink()
                floors.append(floor_seconds)
            size = out.stat().st_size
            quantize, quantize_cpu, theirs, theirs_cpu = map(float, subprocess.run(
                [sys.executable, "-c", _QUANTIZER_ALONE, str(model), kind, str(layers), str(args.no_llama_cpp)],
                capture_output=True, text=True, env=env, check=True).stdout.split())
            ratio = min(exports) / min(floors)
            target = 3.0 if kind.startswith("q4_k") or kind.startswith("q5_k") or kind == "q6_k" else 1.5
            fastest = exports.index(min(exports))
            print(f"{kind:<8} {min(exports):>9.2f} {cpus[fastest]:>6.1f} {streams[fastest]:>8.2f} {min(floors):>8.2f} "
                  f"{ratio:>6.2f} "
                  f"{target:>6.1f} {f'{quantize:.2f} ({quantize_cpu:.1f})':>16} "
                  f"{f'{theirs:.2f} ({theirs_cpu:.1f})':>17} {min(exports) / (min(floors) + quantize):>17.2f} "
                  f"{peak / 1e6:>8.0f} {size / 1e6:>8.1f} {size / predicted:>9.4f}")
            out.unlink()


if __name__ == "__main__":
    main()
