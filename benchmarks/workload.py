"""What the benchmarks share about the machine they run on: a competing CPU load (a busy workstation), the load
average printed with every table, mergekit's venv (installed by recipe_parity.py), and dropping the page cache."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

MERGEKIT_VENV = Path("/tmp/mergekit-parity-venv")  # recipe_parity.py's default --venv


def load_average() -> str:
    """The 1, 5 and 15 minute load averages and the core count, for the header of a table."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


class StolenTime:
    """The CPU time the virtual machine's host gave to others since this was made (the `steal` column of
    /proc/stat), for the line under a measurement: on a shared host it explains a run slower than its neighbours."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[float, float] | None:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        except OSError:
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        if len(fields) < 8:
            return None
        return int(fields[7]) / ticks, sum(int(f) for f in fields[:8]) / ticks

    def since(self) -> str:
        end = self._read()
        if self._start is None or end is None:
            return "stolen time unknown (no /proc/stat)"
        stolen, total = end[0] - self._start[0], end[1] - self._start[1]
        return f"{stolen:.1f} s of {total:.0f} s of CPU time stolen by the host ({100 * stolen / max(total, 1e-9):.1f} %)"


def memory_copy_rate(megabytes: int = 128, repeat: int = 3) -> float:
    """This host's memory copy rate now, in GB/s (the fastest of `repeat` copies of `megabytes`, one thread), for
    the line under a measurement: a neighbour on a shared host that takes memory bandwidth slows every merge without
    stealing CPU time, and a rate that drops between methods says their times are not comparable."""
    source, target = bytearray(b"\1") * (megabytes << 20), bytearray(megabytes << 20)  # the source's pages written
    target[:] = source  # the target's pages exist before the timed copies
    fastest = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        target[:] = source
        fastest = min(fastest, time.perf_counter() - start)
    return len(source) / fastest / 1e9


# A fixed piece of single-threaded merge work (bf16 read as float32, an elementwise blend, a sort of magnitudes),
# timed in its own process: run quiet and under the competing load, it measures how much slower one of this host's
# cores computes while the other core is busy, which no threading design can win back. Prints CPU, then wall seconds.
ONE_THREAD_WORK = """
import time, torch
torch.set_num_threads(1)
stored = torch.randn(1 << 21, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
cpu, start = time.process_time(), time.perf_counter()
for _ in range(6):
    values = stored.float()
    values.lerp_(values.flip(0), 0.5)
    values.abs_().sort()
print(time.process_time() - cpu)
print(time.perf_counter() - start)
"""


class CompetingLoad:
    """One busy Python process per half of the cores (at least one), like a browser, an IDE or a training run
    sharing the workstation; stopped (by their own ids) when the block ends."""

    def __init__(self) -> None:
        self.count = max(1, (os.cpu_count() or 2) // 2)
        self._processes: list[subprocess.Popen] = []

    def __enter__(self) -> CompetingLoad:
        self._processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self._processes:
            process.kill()
            process.wait()
        self._processes = []


def mergekit_tool(name: str, venv: Path = MERGEKIT_VENV) -> Path | None:
    """mergekit's `name` command (mergekit-yaml, mergekit-extract-lora) from recipe_parity.py's venv; None when
    it is not installed there (install_mergekit installs it)."""
    tool = venv / "bin" / name
    return tool if tool.exists() else None


def install_mergekit(venv: Path = MERGEKIT_VENV) -> None:
    """Install mergekit 0.1.5 into `venv` (sharing this project's torch), as recipe_parity.py does."""
    sys.path.insert(0, str(Path(__file__).parent))
    from recipe_parity import ensure_mergekit  # noqa: PLC0415

    ensure_mergekit(venv)


def drop_page_cache(files: list[Path]) -> str:
    """Make the next reads of `files` come from the disk; returns how (for the table's header).

    As root, `echo 3 > /proc/sys/vm/drop_caches` drops every cached page. Where that is refused (a container, no
    root), each file's cached pages are evicted with posix_fadvise(DONTNEED), which needs no privilege. Either way
    a virtual machine's host may still cache the disk, which this cannot see.
    """
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "page cache dropped (drop_caches)"
    except OSError as error:
        how = f"drop_caches refused ({error.strerror}): input pages evicted with posix_fadvise(DONTNEED)"
    for file in files:
        descriptor = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)
    return how
