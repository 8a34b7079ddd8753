"""The probe result as readable text for a terminal (`mergesmith probe`)."""

from __future__ import annotations

import time

from guiapp.facts.dtypes import PROBED, short_name
from guiapp.system.capabilities import JOB_OPERATIONS, describe_device, device_verdict, dtype_options
from guiapp.system.probe import PACKED, ProbeResult
from guiapp.system.units import format_bytes

OPERATION_COLUMN = 20
DTYPE_COLUMN = 9


def format_probe_report(result: ProbeResult, verbose: bool = False) -> str:
    """The answer first (per device, the dtype to store in and the one computed in), then the devices; `verbose`
    adds the operation × dtype matrix of each device with its failures, the speeds and every job's dtypes."""
    versions = ", ".join(f"{name} {version}" for name, version in result.versions.items())
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(result.probed_at)) if result.probed_at else "never"
    lines = [f"Probed {when} in {result.duration_seconds:.1f} s ({versions or 'versions unknown'})", ""]
    lines += [device_verdict(result, device) for device in result.devices]
    if result.problem:
        lines += ["", f"Problem: {result.problem}", "Run `mergesmith probe --refresh` to try again."]
    lines += ["", "Devices"]
    for device in result.devices:
        lines.append(f"  {describe_device(device)}")
        lines.append(f"    {_device_details(device)}")
    if not verbose:
        lines += ["", "Every operation tested in each dtype, the failures, the speeds and the dtypes each job can "
                  "store: mergesmith probe --verbose"]
        return "\n".join(lines)
    for device in result.devices:
        lines += ["", *_matrix(result, device["id"]), "", *_speeds(result, device["id"]), "",
                  *_job_options(result, device["id"])]
    return "\n".join(lines)


def _device_details(device: dict) -> str:
    facts = []
    if device.get("memory_free") is not None:
        facts.append(f"{format_bytes(device['memory_free'])} free")
    if device.get("isa"):
        facts.append(f"ISA {device['isa']}")
    if device.get("flags"):
        facts.append("flags " + " ".join(device["flags"]))
    if device.get("compute_capability"):
        facts.append(f"compute capability {device['compute_capability']}")
    if device.get("bf16_native") is not None:
        facts.append(f"native bfloat16: {'yes' if device['bf16_native'] else 'no'}")
    if device.get("driver"):
        facts.append(f"driver {device['driver']}")
    return "; ".join(facts)


def _matrix(result: ProbeResult, device: str) -> list[str]:
    operations = list(dict.fromkeys(check.operation for check in result.checks
                                    if check.device == device and check.dtype != PACKED))
    header = "".join(short_name(dtype).ljust(DTYPE_COLUMN) for dtype in PROBED)
    lines = [f"Operations on {device} (ok works, -- fails, ? not tested)",
             f"  {'':<{OPERATION_COLUMN}}{header}".rstrip()]
    for operation in operations:
        cells = []
        for dtype in PROBED:
            check = result.check(device, dtype, operation)
            cells.append(("?" if check is None else "ok" if check.ok else "--").ljust(DTYPE_COLUMN))
        lines.append(f"  {operation:<{OPERATION_COLUMN}}{''.join(cells)}".rstrip())
    failures = [check for check in result.failures() if check.device == device]
    if failures:
        lines += ["", f"Failures on {device}"]
        lines += [f"  {check.operation} in {check.dtype}: {(check.error or '').splitlines()[0]}" for check in failures]
    return lines + ["", dequantizers_line(result, device)]


def dequantizers_line(result: ProbeResult, device: str) -> str:
    """Which quantized formats' dequantizers run on `device` ("Quantized models read on cpu: … (float8 upcast to
    float32 first)"), from the probe's "dequantize …" checks."""
    checks = [check for check in result.checks if check.device == device and check.dtype == PACKED]
    if not checks:
        return f"Quantized models read on {device}: not tested (run `mergesmith probe --refresh`)"
    works = [c.operation.removeprefix("dequantize ") for c in checks if c.ok]
    fails = [c.operation.removeprefix("dequantize ") for c in checks if not c.ok]
    upcast = "" if all(c.ok for c in result.checks if c.device == device and c.dtype.startswith("float8")) \
        else " (float8 has no arithmetic here: it is upcast to float32 first)"
    return (f"Quantized models read on {device}: {', '.join(works) or 'none'}{upcast}"
            + (f"; not: {', '.join(fails)}" if fails else ""))


def _speeds(result: ProbeResult, device: str) -> list[str]:
    reference = result.speed(device, "float32", "matmul")
    lines = [f"Speed on {device} (small fixed workloads)"]
    for dtype in PROBED:
        speed = result.speed(device, dtype, "matmul")
        if speed is None or not speed.gflops:
            continue
        comparison = ""
        if reference and reference.gflops and dtype != "float32":
            ratio = speed.gflops / reference.gflops
            faster = ratio >= 1
            comparison = f"{ratio:.1f}× faster than float32" if faster else f"{1 / ratio:.0f}× slower than float32"
        lines.append(f"  {dtype:<{OPERATION_COLUMN}}{speed.gflops:>9.1f} GFLOP/s   {comparison}".rstrip())
    for workload, unit in (("svd", "GFLOP/s"), ("elementwise", "GB/s")):
        speed = result.speed(device, "float32", workload)
        if speed is not None:
            value = speed.gflops if unit == "GFLOP/s" else speed.gbps
            lines.append(f"  {'float32 ' + workload:<{OPERATION_COLUMN}}{value:>9.1f} {unit}")
    return lines


def _job_options(result: ProbeResult, device: str) -> list[str]:
    lines = [f"Output dtypes each job can use on {device}"]
    for job in JOB_OPERATIONS:
        offered, refused = [], []
        for choice in dtype_options(result, job, device):
            (offered if choice.possible else refused).append(choice.label)
        lines.append(f"  {job}: {', '.join(offered) or 'none'}")
        lines += [f"    not: {label}" for label in refused]
    return lines
