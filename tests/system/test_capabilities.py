"""The dropdown model: what each job kind may store on each device, read from the real probe of this CPU."""

from __future__ import annotations

import dataclasses

import pytest

from guiapp.system.capabilities import JOB_OPERATIONS, device_options, dtype_options, option
from guiapp.system.probe import Check, ProbeResult
from tests.support.devices import absent_cuda_device


def _with_check(result: ProbeResult, dtype: str, operation: str, error: str | None) -> ProbeResult:
    """The same matrix with one check replaced (a machine that differs from this one in that single respect)."""
    checks = [check for check in result.checks if (check.dtype, check.operation) != (dtype, operation)]
    checks.append(Check("cpu", dtype, operation, ok=error is None, error=error))
    return dataclasses.replace(result, checks=checks)


def test_bf16_extraction_on_cpu_is_offered_computed_in_float32(probed):
    # SVD in bfloat16 fails on this CPU (see test_probe), yet the extraction is offered: it decomposes in float32.
    assert not probed.check("cpu", "bfloat16", "svd").ok
    choice = option(probed, "extract", "cpu", "bfloat16")
    assert choice.possible and choice.compute_dtype == "float32"
    assert choice.note.startswith("computed in float32") and choice.label.startswith("bfloat16 (computed in float32")


def test_every_job_offers_every_storage_dtype_this_cpu_can_cast_and_save(probed):
    for job in JOB_OPERATIONS:
        options = dtype_options(probed, job, "cpu")
        assert [o.storage_dtype for o in options][:4] == ["float32", "float64", "bfloat16", "float16"]
        for choice in options:
            storable = all(probed.check("cpu", choice.storage_dtype, op).ok
                           for op in ("cast_to_float32", "cast_from_float32", "safetensors"))
            assert choice.possible == storable
    assert option(probed, "merge", "cpu", "float32").note == ""
    assert option(probed, "merge", "cpu", "float64").compute_dtype == "float64"


def test_float8_storage_follows_the_matrix(probed):
    assert option(probed, "merge", "cpu", "float8_e4m3fn").possible  # casts and safetensors work here
    broken = _with_check(probed, "float8_e4m3fn", "safetensors", "SafetensorError: unsupported dtype F8_E4M3")
    refused = option(broken, "merge", "cpu", "float8_e4m3fn")
    assert not refused.possible and refused.compute_dtype is None
    assert "saving float8_e4m3fn to safetensors fails on cpu" in refused.reason and "unsupported dtype F8_E4M3" in refused.reason
    assert "not available" in refused.label


def test_compute_falls_back_to_float64_when_float32_lacks_an_operation(probed):
    no_svd = _with_check(probed, "float32", "svd", 'NotImplementedError: "svd" not implemented for \'Float\'')
    choice = option(no_svd, "extract", "cpu", "bfloat16")
    assert choice.possible and choice.compute_dtype == "float64" and "computed in float64" in choice.note
    assert option(no_svd, "merge", "cpu", "bfloat16").compute_dtype == "float32"  # merges need no SVD
    with_neither = _with_check(no_svd, "float64", "svd", "NotImplementedError: no svd")
    refused = option(with_neither, "extract", "cpu", "bfloat16")
    assert not refused.possible and "SVD in float32 fails on cpu" in refused.reason


def test_merges_need_float64_reductions_extractions_do_not(probed):
    # Like Apple's MPS: no float64 at all. Merge methods accumulate in float64, extractions need only float32.
    no_float64 = probed
    for operation in ("cast_from_float32", "sum", "mul", "matmul"):
        no_float64 = _with_check(no_float64, "float64", operation, "TypeError: Cannot convert to float64")
    merge = option(no_float64, "merge", "cpu", "bfloat16")
    assert not merge.possible and "converting float32 to float64 fails on cpu" in merge.reason
    assert option(no_float64, "extract", "cpu", "bfloat16").possible


def test_a_device_slower_than_the_cpu_is_flagged(probed):
    cpu_speed = probed.speed("cpu", "float32", "matmul")
    gpu = {"id": "xpu:0", "kind": "xpu", "name": "Slow iGPU", "memory_total": 2**30, "memory_free": 2**30}
    gpu_checks = [dataclasses.replace(check, device="xpu:0") for check in probed.checks if check.device == "cpu"]
    slow_speed = dataclasses.replace(cpu_speed, device="xpu:0", gflops=cpu_speed.gflops / 20)
    machine = dataclasses.replace(probed, devices=[*probed.devices, gpu], checks=[*probed.checks, *gpu_checks],
                                  speeds=[*probed.speeds, slow_speed])
    choice = option(machine, "merge", "xpu:0", "bfloat16")
    assert choice.possible and choice.slow and "20× slower than float32 on the CPU" in choice.note
    assert not option(machine, "merge", "cpu", "bfloat16").slow


def test_absent_device_and_untested_combinations_are_refused_with_the_reason(probed):
    absent = absent_cuda_device()
    missing = option(probed, "extract", absent, "bfloat16")
    assert not missing.possible and f"there is no {absent} on this machine" in missing.reason
    truncated = dataclasses.replace(probed, checks=[c for c in probed.checks if c.operation != "svd"],
                                    problem="The probe crashed while testing cpu float32 svd.")
    untested = option(truncated, "extract", "cpu", "float32")
    assert not untested.possible and "not tested (the probe did not get that far)" in untested.reason
    assert option(truncated, "merge", "cpu", "float32").possible


def test_device_dropdown_lists_the_cpu_with_its_memory(probed):
    entries = device_options(probed, "merge")
    assert entries[0].device == "cpu" and entries[0].possible
    assert entries[0].label.startswith("CPU: ") and "GB RAM" in entries[0].label


def test_a_gpu_nothing_was_probed_on_is_no_option(probed):
    assert option(probed, "apply", "cpu", "float16").compute_dtype == "float32"
    gpu = {"id": "cuda:0", "kind": "cuda", "name": "Test GPU", "memory_total": 2**33, "memory_free": 2**33}
    machine = dataclasses.replace(probed, devices=[*probed.devices, gpu])  # present, but nothing probed on it
    chosen = option(machine, "extract", "cuda:0", "bfloat16")
    assert not chosen.possible and "was not tested" in chosen.reason


def test_unknown_names_are_programming_errors(probed):
    with pytest.raises(ValueError):
        option(probed, "quantize", "cpu", "float32")
    with pytest.raises(ValueError):
        option(probed, "merge", "cpu", "int4")
    with pytest.raises(ValueError):
        option(probed, "merge", "cpu", "float32", compute_dtype="bfloat16")
