"""What this machine can do: devices × dtypes × operations, probed in a child process and cached.

`probe()` returns the cached `ProbeResult` for this machine (keyed by torch build, devices and drivers) or runs
`guiapp.system.probe_child` in a separate process with a time limit. A child that hangs or crashes (a GPU
driver can do both) cannot take the app down: the result then holds everything finished before that, the step
that died, and a `problem` saying so. This module never imports torch; only the child does.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from guiapp import __version__
from guiapp.errors import MergesmithError
from guiapp.system.bounded import JSON_BYTES, load_json_limited
from guiapp.system.paths import expanded, home_dir

CACHE_DIR_VARIABLE = "MERGESMITH_CACHE_DIR"
DEFAULT_TIMEOUT_SECONDS = 120.0
RESULT_FORMAT = 1  # bump when the stored layout changes, so old cache files are ignored

PACKED = "packed"  # the dtype of the dequantizer checks: they start from packed codes, not from one float dtype


@dataclass(frozen=True)
class Check:
    """One operation in one dtype on one device: did it work, and if not, the exact error."""

    device: str
    dtype: str
    operation: str
    ok: bool
    error: str | None = None


@dataclass(frozen=True)
class Speed:
    """A timed fixed workload: "matmul" (gflops), "svd" (gflops) or "elementwise" (gbps, memory traffic)."""

    device: str
    dtype: str
    workload: str
    seconds: float
    gflops: float | None = None
    gbps: float | None = None


@dataclass
class ProbeResult:
    """The capability matrix of one machine and torch build.

    `devices` are dicts as the child reported them (id, kind, name, memory_total, memory_free, bf16_native, …;
    the CPU also has cores and ISA flags). `problem` is None after a complete probe, otherwise what went
    wrong (hang, crash) and the step it happened in; checks never reached are simply absent.
    """

    fingerprint: dict[str, str]
    versions: dict[str, str] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    speeds: list[Speed] = field(default_factory=list)
    problem: str | None = None
    probed_at: float = 0.0
    duration_seconds: float = 0.0

    def check(self, device: str, dtype: str, operation: str) -> Check | None:
        """The check for this combination (the first, if the child reported it twice), or None when it was never
        probed."""
        return self._checks_by_key().get((device, dtype, operation))

    def _checks_by_key(self) -> dict[tuple[str, str, str], Check]:
        # The window asks about 1,600 times while it fills its dropdowns: one look-up each instead of a walk over
        # every check. Built again when `checks` was replaced or grew: the probe appends while it reads the child,
        # and nothing changes a check in place (an edit that keeps the length would not be seen).
        kept = self.__dict__.get("_check_index")
        if kept is None or kept[0] is not self.checks or kept[1] != len(self.checks):
            index = {(c.device, c.dtype, c.operation): c for c in reversed(self.checks)}
            kept = self.__dict__["_check_index"] = (self.checks, len(self.checks), index)
        return kept[2]

    def speed(self, device: str, dtype: str, workload: str) -> Speed | None:
        for speed in self.speeds:
            if (speed.device, speed.dtype, speed.workload) == (device, dtype, workload):
                return speed
        return None

    def device(self, device_id: str) -> dict[str, Any] | None:
        return next((device for device in self.devices if device["id"] == device_id), None)

    def failures(self) -> list[Check]:
        return [check for check in self.checks if not check.ok]

    def to_json(self) -> dict[str, Any]:
        return {"format": RESULT_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeResult:
        """Rebuild a stored result. Raises ValueError (or KeyError/TypeError) when `data` is not one."""
        if data.get("format") != RESULT_FORMAT:
            raise ValueError(f"probe result format {data.get('format')!r}, expected {RESULT_FORMAT}")
        return cls(
            fingerprint=data["fingerprint"],
            versions=data["versions"],
            devices=data["devices"],
            checks=[Check(**check) for check in data["checks"]],
            speeds=[Speed(**speed) for speed in data["speeds"]],
            problem=data["problem"],
            probed_at=data["probed_at"],
            duration_seconds=data["duration_seconds"],
        )


def probe(refresh: bool = False, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> ProbeResult:
    """The capability matrix of this machine: from the cache when it matches, else probed now (a few seconds).

    `refresh=True` probes again whatever the cache holds. Probing blocks for its duration, so the window calls
    this off its GUI thread. Never raises for a probe that hangs or crashes: the returned result says so in
    `problem`. A cache folder that cannot be written only means no caching.
    """
    if not refresh:
        cached = cached_probe()
        if cached is not None:
            return cached
    fingerprint = machine_fingerprint()
    result = run_probe_child(probe_child_command(), fingerprint, timeout=timeout)
    try:
        store(result, cache_file(fingerprint))
    except OSError:
        pass  # a read-only cache folder costs a re-probe next time, nothing else
    return result


def cached_probe() -> ProbeResult | None:
    """The stored result for this machine, without probing: None when there is none (or it is stale)."""
    fingerprint = machine_fingerprint()
    return load_cached(cache_file(fingerprint), fingerprint)


def probe_child_command(
    dtypes: Sequence[str] | None = None, operations: Sequence[str] | None = None, timing: bool = True
) -> list[str]:
    """The command line of the probe child (without its --out), optionally limited to some dtypes/operations."""
    command = [sys.executable, "-m", "guiapp.system.probe_child"]
    if dtypes is not None:
        command += ["--dtypes", *dtypes]
    if operations is not None:
        command += ["--operations", *operations]
    if not timing:
        command.append("--no-timing")
    return command


def run_probe_child(command: Sequence[str], fingerprint: dict[str, str], timeout: float) -> ProbeResult:
    """Run `command --out FILE` and read its JSON lines; a hang (past `timeout`) or crash becomes `problem`."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mergesmith-probe-") as folder:
        out = Path(folder) / "probe.jsonl"
        out.touch()
        problem = None
        try:
            completed = subprocess.run(
                [*command, "--out", str(out)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, timeout=timeout, env=child_environment(),
            )
        except subprocess.TimeoutExpired:
            problem = f"The probe stopped responding and was stopped after {timeout:.0f} s"
        except OSError as error:
            problem = f"The probe could not be started ({error})"
        else:
            if completed.returncode != 0:
                problem = f"The probe crashed ({_describe_exit(completed.returncode)})"
                last_line = _last_line(completed.stderr.decode(errors="replace"))
                if last_line:
                    problem += f": {last_line}"
        result = _read_records(out.read_text(encoding="utf-8", errors="replace"), fingerprint, problem)
    result.probed_at = time.time()
    result.duration_seconds = round(time.monotonic() - started, 3)
    return result


def child_environment() -> dict[str, str]:
    """The child finds this package even when Mergesmith runs from a source folder rather than an install."""
    environment = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, environment.get("PYTHONPATH")]))
    return environment


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        import signal  # noqa: PLC0415 - only when the probe's process was killed

        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _read_records(text: str, fingerprint: dict[str, str], problem: str | None) -> ProbeResult:
    result = ProbeResult(fingerprint=fingerprint)
    last_step, finished = None, False
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        kind = record.pop("record", None)
        if kind == "meta":
            result.versions = {name: str(value) for name, value in record.items()}
        elif kind == "device":
            result.devices.append(record)
        elif kind == "check":
            record.pop("seconds", None)
            result.checks.append(Check(**record))
        elif kind == "speed":
            record.pop("size", None)
            result.speeds.append(Speed(**record))
        elif kind == "start":
            last_step = record.get("step")
        elif kind == "done":
            finished = True
    if problem is None and not finished:
        problem = "The probe ended without finishing"
    if problem is not None and last_step is not None:
        problem += f" while testing {last_step}. Combinations not tested are treated as unavailable."
    elif problem is not None:
        problem += " before testing anything."
    result.problem = problem
    return result


# --- cache ---------------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Mergesmith's cache folder: `MERGESMITH_CACHE_DIR` when set, else the platform's user cache folder."""
    override = os.environ.get(CACHE_DIR_VARIABLE)
    if override:
        return expanded(override)
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or home_dir() / "AppData" / "Local") / "Mergesmith" / "Cache"
    if sys.platform == "darwin":
        return home_dir() / "Library" / "Caches" / "Mergesmith"
    return Path(os.environ.get("XDG_CACHE_HOME") or home_dir() / ".cache") / "mergesmith"


def cache_file(fingerprint: dict[str, str]) -> Path:
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"probe-{digest}.json"


def load_cached(path: Path, fingerprint: dict[str, str]) -> ProbeResult | None:
    """The stored result at `path` if it exists, parses, and was probed on a machine with this fingerprint."""
    try:
        result = ProbeResult.from_json(load_json_limited(path, JSON_BYTES, MergesmithError, what="probe result"))
    except (MergesmithError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing, damaged or from another version: probe again
    return result if result.fingerprint == fingerprint else None


def store(result: ProbeResult, path: Path) -> None:
    """Write `result` to `path` atomically (a crash mid-write leaves the old file or none). Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(result.to_json(), indent=1), encoding="utf-8")
    os.replace(partial, path)


def machine_fingerprint() -> dict[str, str]:
    """What the probe result depends on, read without importing torch or waking a GPU driver.

    The torch build, Python and the environment it runs in (`sys.prefix`: a venv reached as bin/python or as
    bin/python3 is one environment with one probe), the CPU model, the display/compute devices on the PCI bus
    (vendor:device ids), the NVIDIA/AMD driver versions, the visible-device variables, the OS release, and the
    probe's own code (a new Mergesmith may check more operations). Any change re-probes.
    """
    return {
        "probe": _probe_code_digest(),
        "torch": _distribution_version("torch"),
        "python": platform.python_version(),
        "environment": sys.prefix,
        "machine": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": cpuinfo_field("model name") or platform.processor(),
        "gpus": ",".join(_pci_display_devices()),
        "nvidia_driver": _read_first_line("/proc/driver/nvidia/version"),
        "amdgpu_driver": _read_first_line("/sys/module/amdgpu/version"),
        "visible_devices": ";".join(
            f"{name}={os.environ[name]}"
            for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
            if name in os.environ
        ),
        "mac": platform.mac_ver()[0],
    }


def _probe_code_digest() -> str:
    """A digest of the probe child's source, or Mergesmith's version where the source is not on disk (bundles)."""

    try:
        return hashlib.sha256(Path(__file__).with_name("probe_child.py").read_bytes()).hexdigest()[:16]
    except OSError:
        return __version__


def _distribution_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cpuinfo_field(key: str) -> str:
    """The value of the first `key` line of /proc/cpuinfo ("model name", "flags"…); "" where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _read_first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.readline().strip()
    except OSError:
        return ""


def _pci_display_devices() -> list[str]:
    """vendor:device ids of display and 3D controllers (PCI class 0x03xxxx) and accelerators (0x12xxxx)."""
    devices = []
    root = Path("/sys/bus/pci/devices")
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return devices
    for entry in entries:
        try:
            pci_class = (entry / "class").read_text().strip()
            if pci_class.startswith(("0x03", "0x12")):
                devices.append(f"{(entry / 'vendor').read_text().strip()}:{(entry / 'device').read_text().strip()}")
        except OSError:
            continue
    return devices
