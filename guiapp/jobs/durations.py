"""How long a job will take on this machine, as a range: start-up, downloads, and the job's own throughput.

The probe times small fixed workloads, which said "about 6 s" for merges that took 50 s: a job's real cost is
reading, converting, the method's own passes (sorting for TIES' trimming, many matmuls for an extraction) and
writing. So a job's time is

    start-up (a new process importing torch; nothing in the window, where torch is loaded)
  + a fixed cost per job (planning, headers, output folder, marker, tokenizer files)
  + downloads at a conservative rate
  + (fixed cost per job + input bytes × seconds per byte for its kind and method) × how busy the machine is,

where seconds per byte comes from jobs that finished on this machine (the median of the last few, recorded by
the job runner in the config folder) or, before there are any, from reference rates measured by
benchmarks/estimates.py, scaled by how fast the probe found this machine against the one they were measured on.
Both are rates of a quiet machine: a job shares the cores with every other runnable program, so one that finished
while the machine was busy is recorded divided by how busy it was, and the next estimate is multiplied by how busy
the machine is now (on two shared cores, jobs took 2–5 times their quiet time, and the estimates were that low).
The range is wide until this machine has finished a job of that kind and method, narrower afterwards.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path

from guiapp.errors import MergesmithError
from guiapp.system.bounded import JSON_BYTES, load_json_limited
from guiapp.system.paths import settings_file
from guiapp.system.resources import TimeEstimate

TIMINGS_NAME = "job_timings.json"
# Seconds per input byte of a quiet machine, measured by benchmarks/estimates.py (2 cores shared with other work,
# each job's time divided by `machine_slowdown` while it ran, 2026-11), and the probe's float32 speeds there;
# other machines scale these by their own probe (within 4× either way: the probe's small workloads are noisy).
_REFERENCE_SECONDS_PER_BYTE = {
    "merge": 4e-9,
    "merge/linear": 1.7e-9,
    "merge/ties": 6e-9,
    # Per unit of work: a byte of a bfloat16 pair decomposed at rank 16 (lowrank.module_work), not per byte read.
    "extract": 8e-9,
    "apply": 4e-9,
    # Per byte written: an MoE assembly reads each byte once and writes it (benchmarks/moe.py).
    "moe": 4e-9,
    # Try's Generate and Perplexity count their work in nanoseconds of the reference machine (jobs/estimates.py).
    "try": 1.6e-9,
    "perplexity": 1.1e-9,
}
_REFERENCE_ELEMENTWISE_GBPS = 40.0
_REFERENCE_MATMUL_GFLOPS = 100.0
_MAX_PROBE_SCALE = 4.0
_MAX_SLOWDOWN = 20.0
# Planning, headers, the output folder and its marker, tokenizer and config files: measured about 1 s on a busy
# machine, 0.4 s of a quiet one.
JOB_OVERHEAD_SECONDS = 0.4
# Nothing is known about the network: a rate most connections reach (downloads report their real rate as they go).
DOWNLOAD_BYTES_PER_SECOND = 20e6
# Range around the best guess, before and after this machine has finished a job of the same kind and method.
_UNCALIBRATED_RANGE = (0.6, 1.8)
_CALIBRATED_RANGE = (0.75, 1.35)
# Jobs smaller than this are all fixed cost: they say nothing about throughput.
_MIN_CALIBRATION_BYTES = 20_000_000
_KEPT_SAMPLES = 5

_timings_lock = threading.Lock()
_pending = threading.local()


def timing_key(kind: str, method: str | None = None) -> str:
    """"merge/ties", "extract", "apply": what a throughput is measured and looked up by."""
    return f"{kind}/{method}" if method else kind


def estimate_duration(key: str, input_bytes: int, probe_result, device: str, *, download_bytes: int = 0,
                      startup_seconds: float = 0.0) -> TimeEstimate | None:
    """The time a job of `key` reading `input_bytes` (after downloading `download_bytes`) takes on `device`.

    `startup_seconds` is what a new process spends before the job (the CLI passes its own so far; the window 0).
    None when there is neither a probe of this machine nor an earlier job to go by, or for a GPU (not measured).
    """
    measured = measured_seconds_per_byte(key)
    if measured is not None:
        rate, basis, spread = measured, f"{key}: earlier jobs on this machine", _CALIBRATED_RANGE
    else:
        rate = _reference_rate(key, probe_result, device)
        if rate is None:
            return None
        basis, spread = f"{key}: reference throughput scaled by this machine's probe", _UNCALIBRATED_RANGE
    busy = machine_slowdown()
    fixed = startup_seconds + JOB_OVERHEAD_SECONDS * busy + download_bytes / DOWNLOAD_BYTES_PER_SECOND
    work = input_bytes * rate * busy
    if busy > 1.05:
        basis += f", the machine {busy:.1f}× slower now for other programs"
    seconds = fixed + work
    return TimeEstimate(seconds=seconds, basis=basis, low=fixed * 0.8 + work * spread[0],
                        high=fixed * 1.25 + work * spread[1])


def _reference_rate(key: str, probe_result, device: str) -> float | None:
    if probe_result is None or device != "cpu":
        return None
    kind = key.split("/", 1)[0]
    rate = _REFERENCE_SECONDS_PER_BYTE.get(key) or _REFERENCE_SECONDS_PER_BYTE[kind]
    if kind == "extract":
        speed = probe_result.speed("cpu", "float32", "matmul")
        scale = _REFERENCE_MATMUL_GFLOPS / speed.gflops if speed and speed.gflops else 1.0
    else:
        speed = probe_result.speed("cpu", "float32", "elementwise")
        scale = _REFERENCE_ELEMENTWISE_GBPS / speed.gbps if speed and speed.gbps else 1.0
    return rate * min(_MAX_PROBE_SCALE, max(1 / _MAX_PROBE_SCALE, scale))


def machine_slowdown() -> float:
    """How many times longer than on a quiet machine a job takes now: one over the share of a core a thread of
    ours gets (measured by keeping one busy for a tenth of a second: steady to a few hundredths on a machine
    with a load of 10 on 2 cores, where it got 0.29; the load average itself said 5.9 and overestimated), from
    1 to `_MAX_SLOWDOWN`."""
    share = _thread_share()
    return min(_MAX_SLOWDOWN, max(1.0, 1.0 / share if share > 0 else _MAX_SLOWDOWN))


def _thread_share(seconds: float = 0.1) -> float:
    """The fraction of the last `seconds` of wall time this thread spent on a core while trying to run."""
    wall, cpu = time.perf_counter(), time.thread_time()
    while time.perf_counter() - wall < seconds:
        pass
    return (time.thread_time() - cpu) / (time.perf_counter() - wall)


def process_seconds_so_far() -> float:
    """Wall-clock seconds since this process started (interpreter, imports, torch): a new process's start-up."""
    try:  # Linux: both counted from boot, to the hundredth of a second
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())


# --- learning from finished jobs ---------------------------------------------------------------------------

def job_started() -> None:
    """The job runner starts a job on this thread: forget a measurement begun by anything before it."""
    _pending.started = time.monotonic()
    _pending.work = None
    _pending.busy = machine_slowdown()


def work_begins(key: str, input_bytes: int) -> None:
    """The job on this thread has planned and estimated its work (`key`, `input_bytes`) and starts it now."""
    if getattr(_pending, "started", None) is not None:
        _pending.work = (key, input_bytes, time.monotonic())


def job_finished() -> None:
    """The job on this thread finished well: record its throughput for the next estimate of its kind."""
    work = getattr(_pending, "work", None)
    _pending.started = _pending.work = None
    if work is None:
        return
    key, input_bytes, began = work
    if input_bytes >= _MIN_CALIBRATION_BYTES:
        # How busy the machine was: the mean of the readings as the job started and as it ended (the load
        # average follows a minute behind, so neither alone).
        busy = (getattr(_pending, "busy", None) or machine_slowdown()) / 2 + machine_slowdown() / 2
        seconds = max(0.0, (time.monotonic() - began) / busy - JOB_OVERHEAD_SECONDS)
        record_throughput(key, seconds / input_bytes)


def record_throughput(key: str, seconds_per_byte: float) -> None:
    """Keep `seconds_per_byte` for `key` (the last few per key). An unwritable config folder costs only this."""
    with _timings_lock:
        timings = _load()
        timings[key] = [*timings.get(key, []), seconds_per_byte][-_KEPT_SAMPLES:]
        path = settings_file(TIMINGS_NAME)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps(timings, indent=1), encoding="utf-8")
            os.replace(temporary, path)
        except OSError:
            pass


def measured_seconds_per_byte(key: str) -> float | None:
    """The median seconds per input byte of the last finished jobs of `key` here, or None before the first."""
    samples = _load().get(key)
    return statistics.median(samples) if samples else None


def _load() -> dict[str, list[float]]:
    try:
        data = load_json_limited(settings_file(TIMINGS_NAME), JSON_BYTES, MergesmithError, what="timings file")
    except MergesmithError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(key): [float(v) for v in values if isinstance(v, (int, float)) and v >= 0]
            for key, values in data.items() if isinstance(values, list)}
