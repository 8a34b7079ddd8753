"""The dtype a model runs in for Try, from the probe: its own where the device computes in it at full speed,
float32 where it lacks a kernel (the seed failure "addmm_impl_cpu_" not implemented for 'Half') or is emulated."""

from __future__ import annotations

import dataclasses

from guiapp.system.capabilities import inference_option
from guiapp.system.probe import Check, ProbeResult, Speed


def _with(result: ProbeResult, dtype: str, operation: str, error: str | None = None,
          gflops: float | None = None) -> ProbeResult:
    """The same matrix with one check (and optionally the dtype's matmul speed) replaced."""
    checks = [c for c in result.checks if (c.device, c.dtype, c.operation) != ("cpu", dtype, operation)]
    checks.append(Check("cpu", dtype, operation, ok=error is None, error=error))
    speeds = result.speeds
    if gflops is not None:
        speeds = [s for s in speeds if (s.device, s.dtype, s.workload) != ("cpu", dtype, "matmul")]
        speeds.append(Speed("cpu", dtype, "matmul", 0.01, gflops=gflops))
    return dataclasses.replace(result, checks=checks, speeds=speeds)


def test_float16_without_cpu_kernels_runs_in_float32(probe_in_cache):
    fast = probe_in_cache.speed("cpu", "float32", "matmul").gflops
    old_torch = _with(probe_in_cache, "float16", "addmm",
                      "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'",
                      gflops=fast)
    choice = inference_option(old_torch, "cpu", "float16")
    assert choice.possible and choice.compute_dtype == "float32"
    assert "matrix multiply-add in float16 fails on cpu" in choice.note and "addmm_impl_cpu_" in choice.note


def test_float16_at_full_speed_runs_in_float16(probe_in_cache):
    fast = probe_in_cache.speed("cpu", "float32", "matmul").gflops
    choice = inference_option(_with(probe_in_cache, "float16", "matmul", gflops=fast), "cpu", "float16")
    assert choice.possible and choice.compute_dtype == "float16" and choice.note == ""


def test_emulated_bfloat16_runs_in_float32_and_says_why(probe_in_cache):
    fast = probe_in_cache.speed("cpu", "float32", "matmul").gflops
    choice = inference_option(_with(probe_in_cache, "bfloat16", "matmul", gflops=fast / 100), "cpu", "bfloat16")
    assert choice.compute_dtype == "float32"
    assert choice.note.startswith("computed in float32: bfloat16 is 100× slower than float32 on the CPU")


def test_float32_and_float64_run_as_stored(probe_in_cache):
    assert inference_option(probe_in_cache, "cpu", "float32").compute_dtype == "float32"
    assert inference_option(probe_in_cache, "cpu", "float64").compute_dtype == "float64"


def test_missing_device_is_refused(probe_in_cache):
    choice = inference_option(probe_in_cache, "cuda:0", "float16")
    assert not choice.possible and "no cuda:0" in choice.reason
