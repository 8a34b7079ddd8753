"""Memory and disk facts, the fit verdict of a job, and the shape of a time estimate (made in guiapp.jobs.durations).

Inputs are plain numbers (bytes): the jobs layer works out a job's working set from the checkpoint headers and
asks here whether it fits on this machine. Only `gpu_memory` imports torch, inside the function.
"""

from __future__ import annotations

import enum
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psutil

from guiapp.errors import ON_CPU, DeviceError, InsufficientResourcesError, OutputError
from guiapp.facts.wording import say
from guiapp.system.paths import expanded
from guiapp.system.units import format_bytes, roughly

# Above these fractions of what is free, a job is "tight": it may fit, but other programs can tip it over.
TIGHT_FRACTION_OF_RAM = 0.8
TIGHT_FRACTION_OF_VRAM = 0.9
TIGHT_FRACTION_OF_DISK = 0.9


@dataclass(frozen=True)
class Memory:
    """`limited`: `total` is a limit set on this process (ulimit -v, a container), not the machine's RAM."""

    total: int
    available: int
    limited: bool = False


@dataclass(frozen=True)
class Disk:
    """Free space of the filesystem holding `path` (the nearest existing folder of the asked-for path)."""

    path: Path
    free: int
    total: int


@dataclass(frozen=True)
class GpuMemory:
    total: int
    free: int | None


def memory() -> Memory:
    """RAM this process may use now: total and available to a new job (free plus reclaimable caches), lowered
    to the limits the process runs under (a container's cgroup memory.max, a `ulimit -v` address-space limit):
    a job that fits the machine but not its limit would be killed or fail halfway."""
    facts = psutil.virtual_memory()
    total, available, limited = facts.total, facts.available, False
    for limit, used in _memory_limits():
        limited = limited or limit < total
        total, available = min(total, limit), min(available, max(0, limit - used))
    return Memory(total=total, available=available, limited=limited)


def _memory_limits() -> list[tuple[int, int]]:
    """(limit, in use) of the cgroup v2 memory limit and of RLIMIT_AS, where they are set (Linux)."""
    limits = []
    try:
        import resource  # noqa: PLC0415 - POSIX only

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            limits.append((soft, psutil.Process().memory_info().vms))
    except (ImportError, OSError):
        pass
    try:
        group = Path("/proc/self/cgroup").read_text().split("::", 1)[1].strip()
        folder = Path("/sys/fs/cgroup") / group.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit != "max":
            limits.append((int(limit), int((folder / "memory.current").read_text())))
    except (OSError, IndexError, ValueError):
        pass
    return limits


def disk(path: Path | str) -> Disk:
    """Free space where `path` will be written; the path need not exist yet (its nearest existing parent counts).

    Raises OutputError when even the existing parent cannot be examined (permissions, a vanished drive).
    """
    candidate = expanded(path).absolute()
    while not candidate.exists() and candidate != candidate.parent:
        candidate = candidate.parent
    try:
        usage = shutil.disk_usage(candidate)
    except OSError as error:
        raise OutputError(
            f"Cannot check the free space at {candidate}: {error.strerror or error}.",
            hint="Choose an output folder on a drive that is connected and that you can write to.",
        ) from error
    return Disk(path=candidate, free=usage.free, total=usage.total)


def gpu_memory(device: str) -> GpuMemory | None:
    """Total and free memory of a GPU ("cuda:0", "xpu:0", "mps") now; None for "cpu".

    Raises DeviceError when torch cannot see that device.
    """
    if device == "cpu":
        return None
    import torch  # noqa: PLC0415 - only callers that ask about a GPU pay for torch

    kind, _, index_text = device.partition(":")
    index = int(index_text or 0)
    try:
        if kind == "cuda":
            free, total = torch.cuda.mem_get_info(index)
            return GpuMemory(total=total, free=free)
        if kind == "xpu":
            free, total = torch.xpu.mem_get_info(index)
            return GpuMemory(total=total, free=free)
        if kind == "mps":
            total = torch.mps.recommended_max_memory()
            return GpuMemory(total=total, free=max(0, total - torch.mps.driver_allocated_memory()))
    except (AssertionError, RuntimeError, AttributeError) as error:
        raise DeviceError(
            f"Cannot read the memory of {device}: {error}.",
            hint="Choose a device from the list Mergesmith shows; it only offers devices it found.",
            remedy=ON_CPU,
        ) from error
    raise DeviceError(f"Unknown device {device!r}.", hint='Devices look like "cpu", "cuda:0", "xpu:0" or "mps".')


class FitLevel(enum.Enum):
    """LM Studio-style fit badge, best first."""

    FITS_ON_GPU = "fits on the GPU"
    FITS_IN_RAM = "fits in RAM"
    TIGHT = "tight"
    WILL_NOT_FIT = "will not fit"


@dataclass(frozen=True)
class Fit:
    """The verdict for one job, with the numbers behind it and a one-line reason."""

    level: FitLevel
    reason: str
    device: str
    peak_ram: int
    ram_available: int
    ram_total: int
    peak_vram: int
    vram_free: int | None
    vram_total: int | None
    disk_needed: int
    disk_free: int
    disk_path: Path
    # What would make a job that will not fit fit: one remedy for each problem the reason names, in its order.
    remedies: tuple[str, ...] = ()
    retry_on_cpu: bool = False

    @property
    def fits(self) -> bool:
        return self.level is not FitLevel.WILL_NOT_FIT

    def summary(self) -> str:
        """Readable lines: the verdict, then RAM, VRAM (on a GPU) and disk, needed against available."""
        verdict = f"{self.level.value[0].upper()}{self.level.value[1:]}: {self.reason}"
        return "\n".join([verdict, *self._numbers()])

    def as_error(self) -> InsufficientResourcesError:
        """The error a job raises when it refuses to start because it will not fit."""
        hint = "; ".join(self.remedies)
        return InsufficientResourcesError(
            "\n".join([f"This job will not fit: {self.reason}.", *self._numbers()]),
            hint=say("{advice}.{aside:The CLI's {force} starts it anyway.}", advice=f"{hint[0].upper()}{hint[1:]}"),
            remedy=ON_CPU if self.retry_on_cpu else None,
        )

    def _numbers(self) -> list[str]:
        lines = [f"  RAM:  {format_bytes(self.peak_ram)} needed, {format_bytes(self.ram_available)} available "
                 f"of {format_bytes(self.ram_total)}"]
        if self.device != "cpu":
            free = "unknown" if self.vram_free is None else format_bytes(self.vram_free)
            total = "unknown" if self.vram_total is None else format_bytes(self.vram_total)
            lines.append(f"  VRAM: {format_bytes(self.peak_vram)} needed on {self.device}, {free} free of {total}")
        lines.append(f"  Disk: {format_bytes(self.disk_needed)} needed, {format_bytes(self.disk_free)} free "
                     f"at {self.disk_path}")
        return lines


def fit_verdict(
    peak_ram_bytes: int,
    peak_vram_bytes: int,
    disk_bytes: int,
    device: str,
    destination: Path | str,
    *,
    ram: Memory | None = None,
    vram: GpuMemory | None = None,
    space: Disk | None = None,
) -> Fit:
    """Whether a job with this working set fits this machine: on the GPU / in RAM / tight / will not fit.

    `peak_vram_bytes` counts only when `device` is a GPU. `ram`, `vram` and `space` default to the machine's
    state now (pass them to judge against other numbers). Raises OutputError if the destination's drive cannot
    be examined and DeviceError if the GPU cannot.
    """
    ram = ram or memory()
    space = space or disk(destination)
    if device != "cpu" and vram is None:
        vram = gpu_memory(device)
    problems: list[_Problem] = []
    if disk_bytes > space.free:
        problems.append(_Problem(
            FitLevel.WILL_NOT_FIT,
            f"the output needs {format_bytes(disk_bytes)} at {space.path} but only {format_bytes(space.free)} is free",
            f"free at least {format_bytes(disk_bytes - space.free)} on that disk or choose an output folder on "
            "another disk"))
    elif disk_bytes > TIGHT_FRACTION_OF_DISK * space.free:
        problems.append(_Problem(FitLevel.TIGHT, f"the output needs {format_bytes(disk_bytes)}, nearly all of the "
                                 f"{format_bytes(space.free)} free at {space.path}"))
    if peak_ram_bytes > ram.total:
        limit = (f"Mergesmith may use only {format_bytes(ram.total)} (the memory limit it runs under)" if ram.limited
                 else f"this machine has {format_bytes(ram.total)} in all")
        problems.append(_Problem(FitLevel.WILL_NOT_FIT, f"it needs {format_bytes(peak_ram_bytes)} of RAM and {limit}",
                                 "run it on a computer with more memory"))
    elif peak_ram_bytes > TIGHT_FRACTION_OF_RAM * ram.available:
        problems.append(_Problem(FitLevel.TIGHT, f"it needs {format_bytes(peak_ram_bytes)} of RAM and "
                                 f"{format_bytes(ram.available)} is available now; closing other programs helps"))
    if vram is not None:
        if peak_vram_bytes > vram.total:
            problems.append(_Problem(
                FitLevel.WILL_NOT_FIT,
                f"it needs {format_bytes(peak_vram_bytes)} on {device}, which has {format_bytes(vram.total)}",
                "run it on the CPU, which has more memory than this GPU", retry_on_cpu=True))
        elif vram.free is not None and peak_vram_bytes > TIGHT_FRACTION_OF_VRAM * vram.free:
            problems.append(_Problem(FitLevel.TIGHT, f"it needs {format_bytes(peak_vram_bytes)} on {device} and "
                                     f"{format_bytes(vram.free)} is free now"))
    named: list[_Problem] = []
    if problems:
        # Every problem at the worst level, so that one look says all that must change (a full disk and too
        # little RAM: both, not the one after the other).
        level = max((problem.level for problem in problems), key=list(FitLevel).index)
        named = [problem for problem in problems if problem.level is level]
        reason = ", and ".join(problem.text for problem in named)
    elif vram is not None:
        level = FitLevel.FITS_ON_GPU
        free = vram.free if vram.free is not None else vram.total
        reason = f"it needs {format_bytes(peak_vram_bytes)} of the {format_bytes(free)} free on {device}"
    else:
        level = FitLevel.FITS_IN_RAM
        reason = f"it needs {format_bytes(peak_ram_bytes)} of the {format_bytes(ram.available)} of RAM available"
    return Fit(
        level=level, reason=reason, device=device,
        peak_ram=peak_ram_bytes, ram_available=ram.available, ram_total=ram.total,
        peak_vram=peak_vram_bytes if vram is not None else 0,
        vram_free=vram.free if vram else None, vram_total=vram.total if vram else None,
        disk_needed=disk_bytes, disk_free=space.free, disk_path=space.path,
        remedies=tuple(problem.remedy for problem in named if problem.remedy),
        retry_on_cpu=any(problem.retry_on_cpu for problem in named),
    )


class _Problem(NamedTuple):
    """One way a job does not fit well; `remedy` says what the user can do about one that stops the job."""

    level: FitLevel
    text: str
    remedy: str = ""
    retry_on_cpu: bool = False


def svd_flop_count(rows: int, cols: int) -> float:
    """The usual operation count of a thin SVD of a rows × cols matrix (Golub–Van Loan)."""
    small, large = sorted((rows, cols))
    return 4.0 * large * small**2 + 8.0 * small**3


@dataclass(frozen=True)
class TimeEstimate:
    """How long a job will take: `seconds` is the best guess, `low`–`high` the range shown (never a false
    precision); `basis` says what it came from (probed speeds, earlier jobs), for the log."""

    seconds: float
    basis: str
    low: float | None = None
    high: float | None = None

    def __str__(self) -> str:
        low = self.seconds if self.low is None else self.low
        high = self.seconds if self.high is None else self.high
        return roughly(low, high)
