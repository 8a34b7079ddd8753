"""The probe's workload, run in a child process: `python -m guiapp.system.probe_child --out FILE`.

It finds every device torch can use, then for each device × dtype × operation runs the operation on a small
tensor and records whether it works (with the exact error when it does not), and times a few fixed workloads.
Results are appended to FILE as JSON lines, flushed one by one, and a "start" line precedes every step: if a
driver hangs or crashes the process, the parent still has everything finished so far and knows which step
died. Only this process imports torch; `guiapp.system.probe` reads the lines back.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from typing import Any, TextIO

import psutil
import torch

from guiapp.facts.dtypes import COMPUTE, PROBED
from guiapp.system.probe import PACKED, cpuinfo_field
from guiapp.system.resources import svd_flop_count

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in PROBED}

# CPU flags that decide how fast half types run (bf16 / fp16 instructions, matrix units).
SPEED_FLAGS = (
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni",
    "amx_bf16", "amx_fp16", "amx_tile", "asimd", "bf16", "fphp", "asimdhp", "sve", "sve2", "i8mm",
)

SIDE = 64  # operations are checked on SIDE × SIDE matrices: enough to hit the real kernels, fast everywhere
MATMUL_SIDE = 256
SVD_SIDE = 128
ELEMENTWISE_NUMEL = 1 << 22
TIMING_BUDGET_SECONDS = 0.15

Operation = Callable[[torch.Tensor], Any]


def _safetensors_round_trip(x: torch.Tensor) -> torch.Tensor:
    from safetensors.torch import load, save  # noqa: PLC0415 - a broken safetensors fails this check, not the probe

    return load(save({"t": x.cpu().contiguous()}))["t"].to(x.device)


# Each operation takes a SIDE × SIDE tensor in the dtype under test on the device under test.
OPERATIONS: dict[str, Operation] = {
    "matmul": lambda x: x @ x,
    "addmm": lambda x: torch.addmm(x, x, x),
    "svd": lambda x: torch.linalg.svd(x, full_matrices=False),
    "qr": lambda x: torch.linalg.qr(x),
    "randn": lambda x: torch.randn(x.shape, dtype=x.dtype, device=x.device),
    "rand": lambda x: torch.rand(x.shape, dtype=x.dtype, device=x.device),
    "topk": lambda x: x.flatten().topk(8),
    "kthvalue": lambda x: x.flatten().kthvalue(8),
    "sort": lambda x: torch.sort(x.flatten(), descending=True),
    "argsort": lambda x: torch.argsort(x.abs(), dim=1, descending=True, stable=True),
    "quantile": lambda x: torch.quantile(x.flatten(), 0.9),
    "bernoulli": lambda x: torch.bernoulli(torch.full_like(x, 0.5)),
    "sign": torch.sign,
    "abs": torch.abs,
    "add": lambda x: x + x,
    "mul": lambda x: x * x,
    "sum": torch.sum,
    "cumsum": lambda x: torch.cumsum(x.flatten(), 0),
    "count_nonzero": torch.count_nonzero,
    "compare": lambda x: torch.gt(x, x.flip(0)),
    "where": lambda x: torch.where(torch.gt(x, x.flip(0)), x, x.flip(0)),
    "softmax": lambda x: torch.softmax(x, dim=-1),
    "clamp": lambda x: x.clamp(-1, 1),
    "norm": torch.linalg.vector_norm,
    "lerp": lambda x: torch.lerp(x, x.flip(0), 0.5),
    "acos": lambda x: torch.acos(x * 0),
    "sin": torch.sin,
    "cast_to_float32": lambda x: x.to(torch.float32),
    "cast_to_float64": lambda x: x.to(torch.float64),
    "cast_from_float32": lambda x: torch.ones(x.shape, dtype=torch.float32, device=x.device).to(x.dtype),
    "cast_from_float64": lambda x: torch.ones(x.shape, dtype=torch.float64, device=x.device).to(x.dtype),
    "to_host": lambda x: x.cpu().to(x.device),
    "numpy": lambda x: x.cpu().numpy(),
    "safetensors": _safetensors_round_trip,
}
# Conversions to NumPy and files happen on the host whatever the compute device, so they are checked on CPU only.
HOST_OPERATIONS = ("numpy", "safetensors")

# The torch steps each quantized format's dequantizer (guiapp/checkpoints/quantized) is made of, on stored data of
# that format's kinds (packed uint8 / int32 codes, float8, power-of-two exponents), ending in float32. Recorded
# as checks in the dtype PACKED, operation "dequantize <format>".


def _lookup_nibbles(packed: torch.Tensor) -> torch.Tensor:
    codes = torch.stack((packed >> 4, packed & 0x0F), dim=-1).reshape(-1).long()
    return torch.linspace(-1, 1, 16, device=packed.device)[codes]


def _unpack_int32(packed: torch.Tensor) -> torch.Tensor:
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=packed.device)
    return ((packed.unsqueeze(-1) >> shifts) & 0x0F).flatten(-2)


DEQUANTIZERS: dict[str, Callable[[str], torch.Tensor]] = {
    "bitsandbytes 4-bit": lambda d: _lookup_nibbles(torch.arange(256, dtype=torch.uint8, device=d)).view(-1, 64)
    * torch.rand(8, 1, device=d),
    "bitsandbytes 8-bit": lambda d: torch.arange(-64, 64, dtype=torch.int8, device=d).view(8, 16).float()
    * (torch.rand(8, device=d) / 127).unsqueeze(1),
    "fp8": lambda d: torch.randn(SIDE, SIDE, device=d).to(torch.float8_e4m3fn).float()
    * torch.rand(2, 2, device=d).repeat_interleave(SIDE // 2, 0).repeat_interleave(SIDE // 2, 1),
    "gptq / awq / compressed-tensors": lambda d: (
        _unpack_int32(torch.randint(-2**31, 2**31 - 1, (SIDE, 8), dtype=torch.int32, device=d))
        - 8).float()[:, torch.arange(SIDE, device=d).view(-1, 8)[:, [0, 4, 1, 5, 2, 6, 3, 7]].reshape(-1)],
    "mxfp4": lambda d: torch.ldexp(_lookup_nibbles(torch.arange(256, dtype=torch.uint8, device=d)).view(-1, 32),
                                   (torch.arange(16, dtype=torch.uint8, device=d).int() - 8).unsqueeze(-1).float()),
}


class Recorder:
    """Writes JSON lines to the result file, flushing each one so a crash loses nothing already done."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, record: str, **fields: Any) -> None:
        self._stream.write(json.dumps({"record": record, **fields}) + "\n")
        self._stream.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Mergesmith's capability probe (run by guiapp.system.probe).")
    parser.add_argument("--out", required=True, help="File to append the JSON-lines results to.")
    parser.add_argument("--dtypes", nargs="*", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--operations", nargs="*", default=list(OPERATIONS), choices=list(OPERATIONS))
    parser.add_argument("--no-timing", action="store_true", help="Skip the speed measurements.")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, psutil.cpu_count(logical=False) or 1))
    with open(args.out, "a", encoding="utf-8") as stream:
        recorder = Recorder(stream)
        recorder.write("meta", torch=torch.__version__, python=platform.python_version(), **_library_versions())
        recorder.write("device", **_describe_cpu())
        _probe_device(recorder, "cpu", args.dtypes, args.operations, not args.no_timing)
        for device in _accelerators(recorder):
            recorder.write("device", **device)
            _probe_device(recorder, device["id"], args.dtypes, args.operations, not args.no_timing)
        recorder.write("done")
    return 0


def _library_versions() -> dict[str, str]:
    import numpy  # noqa: PLC0415 - versions are read last, once the checks have run
    import safetensors  # noqa: PLC0415 - with numpy above

    return {"numpy": numpy.__version__, "safetensors": safetensors.__version__}


def _describe_cpu() -> dict[str, Any]:
    flags = _cpu_flags()
    memory = psutil.virtual_memory()
    capability = torch.backends.cpu.get_cpu_capability()
    return {
        "id": "cpu",
        "kind": "cpu",
        "name": cpuinfo_field("model name") or platform.processor() or platform.machine() or "CPU",
        "cores_physical": psutil.cpu_count(logical=False),
        "cores_logical": psutil.cpu_count(logical=True),
        "memory_total": memory.total,
        "memory_free": memory.available,
        "isa": capability,
        "flags": sorted(flag for flag in SPEED_FLAGS if flag in flags),
        "bf16_native": bool({"avx512_bf16", "amx_bf16", "bf16"} & flags),
        "driver": None,
    }


def _cpu_flags() -> set[str]:
    # x86 Linux calls them "flags", ARM Linux "Features"; elsewhere torch's ISA level (reported too) is all there is
    return set((cpuinfo_field("flags") or cpuinfo_field("Features")).split())


def _accelerators(recorder: Recorder) -> list[dict[str, Any]]:
    """Every GPU torch can use: CUDA/ROCm, Apple MPS, Intel XPU. Enumeration itself may hang, hence the step."""
    found: list[dict[str, Any]] = []
    recorder.write("start", step="enumerate accelerators")
    if torch.cuda.is_available():
        backend = "rocm" if torch.version.hip else "cuda"
        runtime = torch.version.hip or torch.version.cuda
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            free, total = torch.cuda.mem_get_info(index)
            with torch.cuda.device(index):
                bf16 = torch.cuda.is_bf16_supported()
            found.append({
                "id": f"cuda:{index}", "kind": backend, "name": props.name, "memory_total": total,
                "memory_free": free, "compute_capability": f"{props.major}.{props.minor}", "bf16_native": bf16,
                "driver": f"{backend} {runtime}",
            })
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        for index in range(xpu.device_count()):
            props = xpu.get_device_properties(index)
            free, total = xpu.mem_get_info(index) if hasattr(xpu, "mem_get_info") else (None, props.total_memory)
            found.append({
                "id": f"xpu:{index}", "kind": "xpu", "name": props.name, "memory_total": total,
                "memory_free": free, "compute_capability": None, "bf16_native": None,
                "driver": getattr(props, "driver_version", None),
            })
    if torch.backends.mps.is_available():
        total = torch.mps.recommended_max_memory() if hasattr(torch.mps, "recommended_max_memory") else None
        found.append({
            "id": "mps", "kind": "mps", "name": f"Apple GPU ({platform.machine()})", "memory_total": total,
            "memory_free": None, "compute_capability": None, "bf16_native": None,
            "driver": f"macOS {platform.mac_ver()[0]}",
        })
    return found


def _synchronize(device: str) -> None:
    """Wait for queued GPU work, so errors and timings belong to the operation that caused them."""
    kind = device.split(":")[0]
    if kind == "mps":
        torch.mps.synchronize()
    elif kind in ("cuda", "xpu"):
        getattr(torch, kind).synchronize(device)


def _probe_device(recorder: Recorder, device: str, dtypes: list[str], operations: list[str], timing: bool) -> None:
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        recorder.write("start", step=f"{device} {dtype_name} tensor")
        try:
            sample = torch.randn(SIDE, SIDE, device=device).to(dtype)
            _synchronize(device)
            creation_error = None
        except Exception as error:  # a dtype this device cannot hold at all fails every operation the same way
            creation_error = error
        for operation in operations:
            if operation in HOST_OPERATIONS and device != "cpu":
                continue
            recorder.write("start", step=f"{device} {dtype_name} {operation}")
            started = time.perf_counter()
            error = creation_error or _attempt(OPERATIONS[operation], sample, device)
            recorder.write(
                "check", device=device, dtype=dtype_name, operation=operation, ok=error is None,
                error=None if error is None else _describe_error(error),
                seconds=round(time.perf_counter() - started, 6),
            )
    for name, dequantize in DEQUANTIZERS.items():
        recorder.write("start", step=f"{device} dequantize {name}")
        started = time.perf_counter()
        error = _attempt(lambda _, run=dequantize: run(device), torch.empty(0), device)
        recorder.write("check", device=device, dtype=PACKED, operation=f"dequantize {name}", ok=error is None,
                       error=None if error is None else _describe_error(error),
                       seconds=round(time.perf_counter() - started, 6))
    if timing:
        _measure_speeds(recorder, device, dtypes)


def _attempt(operation: Operation, sample: torch.Tensor, device: str) -> BaseException | None:
    try:
        operation(sample)
        _synchronize(device)
    except Exception as error:
        return error
    return None


def _describe_error(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text[:600]}"


def _measure_speeds(recorder: Recorder, device: str, dtypes: list[str]) -> None:
    """Matmul speed in every dtype that has it; SVD and elementwise speed in the compute dtypes."""
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        recorder.write("start", step=f"{device} {dtype_name} matmul speed")
        try:
            a = torch.randn(MATMUL_SIDE, MATMUL_SIDE, device=device).to(dtype)
            seconds = _best_time(lambda: a @ a, device)  # noqa: B023 - timed at once
        except Exception:
            continue  # the check above already recorded why matmul fails in this dtype
        recorder.write("speed", device=device, dtype=dtype_name, workload="matmul",
                       size=MATMUL_SIDE, seconds=seconds, gflops=2 * MATMUL_SIDE**3 / seconds / 1e9)
        if dtype_name not in COMPUTE:
            continue
        recorder.write("start", step=f"{device} {dtype_name} svd speed")
        try:
            m = torch.randn(SVD_SIDE, SVD_SIDE, device=device, dtype=dtype)
            seconds = _best_time(lambda: torch.linalg.svd(m, full_matrices=False), device)  # noqa: B023 - timed at once
            recorder.write("speed", device=device, dtype=dtype_name, workload="svd", size=SVD_SIDE,
                           seconds=seconds, gflops=svd_flop_count(SVD_SIDE, SVD_SIDE) / seconds / 1e9)
            v = torch.randn(ELEMENTWISE_NUMEL, device=device, dtype=dtype)
            seconds = _best_time(lambda: torch.add(v, v, alpha=0.5), device)  # noqa: B023 - timed at once
            # an elementwise op reads two operands and writes one result
            recorder.write("speed", device=device, dtype=dtype_name, workload="elementwise",
                           size=ELEMENTWISE_NUMEL, seconds=seconds,
                           gbps=3 * ELEMENTWISE_NUMEL * v.element_size() / seconds / 1e9)
        except Exception:
            continue


def _best_time(work: Callable[[], Any], device: str) -> float:
    """Seconds per run of `work`; on the CPU the better of one thread and all threads.

    When other programs keep a core busy, torch's threads wait on each other and a multi-threaded matmul can
    run 100× slower than on a quiet machine; one thread is immune to that, all threads win when it is quiet.
    """
    if device != "cpu":
        return _time(work, device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = _time(work, device)
    finally:
        torch.set_num_threads(threads)
    return min(single, _time(work, device)) if threads > 1 else single


def _time(work: Callable[[], Any], device: str) -> float:
    """Seconds of the fastest run of `work` after a warm-up, repeating until the budget is spent (at least once).

    The fastest run, not the mean: other programs competing for the cores only ever make runs slower.
    """
    work()
    _synchronize(device)
    fastest, runs, budget_start = float("inf"), 0, time.perf_counter()
    while runs < 50 and (runs == 0 or time.perf_counter() - budget_start < TIMING_BUDGET_SECONDS):
        started = time.perf_counter()
        work()
        _synchronize(device)
        fastest = min(fastest, time.perf_counter() - started)
        runs += 1
    return fastest


if __name__ == "__main__":
    raise SystemExit(main())
