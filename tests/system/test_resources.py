"""Memory and disk facts, the fit verdict, and time estimates."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from guiapp.errors import DeviceError, InsufficientResourcesError
from guiapp.system.resources import (
    Disk,
    FitLevel,
    GpuMemory,
    Memory,
    disk,
    fit_verdict,
    gpu_memory,
    memory,
)
from tests.support.devices import absent_cuda_device

GB = 10**9
PLENTY = Disk(path=Path("/data"), free=500 * GB, total=1000 * GB)


def test_memory_is_this_machines():
    facts = memory()
    assert facts.total == psutil.virtual_memory().total
    assert 0 < facts.available <= facts.total


def test_disk_measures_the_nearest_existing_folder(tmp_path):
    facts = disk(tmp_path / "not" / "yet" / "there")
    assert facts.path == tmp_path
    assert 0 < facts.free <= facts.total


def test_gpu_memory_of_a_device_torch_cannot_see():
    absent = absent_cuda_device()
    assert gpu_memory("cpu") is None
    with pytest.raises(DeviceError) as raised:
        gpu_memory(absent)
    assert f"Cannot read the memory of {absent}" in raised.value.message
    assert raised.value.remedy.changes == {"device": "cpu"}


def test_a_small_job_fits_in_this_machines_ram(tmp_path):
    fit = fit_verdict(100_000_000, 0, 50_000_000, "cpu", tmp_path / "out")
    assert fit.level is FitLevel.FITS_IN_RAM and fit.fits
    assert fit.disk_path == tmp_path and fit.ram_total == psutil.virtual_memory().total
    assert "100.0 MB" in fit.reason


@pytest.mark.parametrize(
    ("peak_ram", "disk_needed", "level", "words"),
    [
        (4 * GB, 10 * GB, FitLevel.FITS_IN_RAM, "it needs 4.0 GB of the 16.0 GB of RAM available"),
        (14 * GB, 10 * GB, FitLevel.TIGHT, "16.0 GB is available now; closing other programs helps"),
        (20 * GB, 10 * GB, FitLevel.TIGHT, "it needs 20.0 GB of RAM"),
        (40 * GB, 10 * GB, FitLevel.WILL_NOT_FIT, "this machine has 32.0 GB in all"),
        (4 * GB, 600 * GB, FitLevel.WILL_NOT_FIT, "the output needs 600.0 GB"),
        (4 * GB, 480 * GB, FitLevel.TIGHT, "nearly all of the 500.0 GB free"),
    ],
)
def test_ram_and_disk_verdicts(peak_ram, disk_needed, level, words):
    fit = fit_verdict(peak_ram, 0, disk_needed, "cpu", "/unused", ram=Memory(32 * GB, 16 * GB), space=PLENTY)
    assert fit.level is level
    assert words in fit.reason


def test_gpu_verdicts_and_the_error_of_a_job_that_will_not_fit():
    ram = Memory(64 * GB, 60 * GB)
    fits = fit_verdict(8 * GB, 10 * GB, GB, "cuda:0", "/unused", ram=ram, vram=GpuMemory(24 * GB, 20 * GB),
                       space=PLENTY)
    assert fits.level is FitLevel.FITS_ON_GPU and "of the 20.0 GB free on cuda:0" in fits.reason
    tight = fit_verdict(8 * GB, 19 * GB, GB, "cuda:0", "/unused", ram=ram, vram=GpuMemory(24 * GB, 20 * GB),
                        space=PLENTY)
    assert tight.level is FitLevel.TIGHT
    too_big = fit_verdict(8 * GB, 30 * GB, GB, "cuda:0", "/unused", ram=ram, vram=GpuMemory(24 * GB, 20 * GB),
                          space=PLENTY)
    assert too_big.level is FitLevel.WILL_NOT_FIT and not too_big.fits
    error = too_big.as_error()
    assert isinstance(error, InsufficientResourcesError) and error.remedy.changes == {"device": "cpu"}
    assert "30.0 GB needed on cuda:0, 20.0 GB free of 24.0 GB" in error.message



def test_a_job_short_of_disk_and_ram_hears_of_both_at_once():
    fit = fit_verdict(40 * GB, 0, 600 * GB, "cpu", "/unused", ram=Memory(32 * GB, 16 * GB), space=PLENTY)
    assert fit.level is FitLevel.WILL_NOT_FIT
    assert "the output needs 600.0 GB" in fit.reason and "it needs 40.0 GB of RAM" in fit.reason
    error = fit.as_error()
    assert "will not fit: the output needs 600.0 GB" in error.message
    # A remedy for each: the disk's names the space to free (a full-disk refusal said "another disk" before).
    assert error.hint.startswith("Free at least 100.0 GB on that disk or choose an output folder on another disk; "
                                 "run it on a computer with more memory."), error.hint
