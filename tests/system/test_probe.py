"""The probe finds this CPU's real failures and speeds; hangs and crashes of the child are reported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from guiapp.system import probe as probe_module
from guiapp.system.probe import (
    Check,
    ProbeResult,
    cache_file,
    load_cached,
    machine_fingerprint,
    probe,
    probe_child_command,
    run_probe_child,
)
from guiapp.system.probe_child import MATMUL_SIDE

HALF = ("bfloat16", "float16")
FLOAT8 = ("float8_e4m3fn", "float8_e5m2")


def _error(result: ProbeResult, dtype: str, operation: str) -> str:
    check = result.check("cpu", dtype, operation)
    assert check is not None, f"{operation} in {dtype} was not probed"
    assert not check.ok, f"{operation} in {dtype} unexpectedly works"
    return check.error or ""


def test_cpu_is_described_from_the_machine(probed):
    cpu = probed.device("cpu")
    assert cpu is not None and probed.devices[0] is cpu
    assert cpu["cores_logical"] >= 1 and cpu["memory_total"] > 2**30
    assert cpu["isa"]  # torch's own CPU capability level, e.g. "AVX2" or "AVX512"
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next(line for line in cpuinfo if line.startswith("flags")).split(":")[1].split()
    assert set(cpu["flags"]) <= set(flags)
    assert cpu["bf16_native"] == ("avx512_bf16" in flags or "amx_bf16" in flags)


def test_float32_and_float64_support_every_operation(probed):
    for dtype in ("float32", "float64"):
        failures = [check for check in probed.failures() if check.dtype == dtype]
        assert failures == []
    assert len({check.operation for check in probed.checks}) >= 25


def test_decompositions_fail_in_half_types_with_torchs_message(probed):
    assert 'not implemented for \'BFloat16\'' in _error(probed, "bfloat16", "svd")
    assert '"linalg_svd_cpu" not implemented for \'Half\'' in _error(probed, "float16", "svd")
    assert '"geqrf_cpu" not implemented for \'BFloat16\'' in _error(probed, "bfloat16", "qr")
    assert '"geqrf_cpu" not implemented for \'Half\'' in _error(probed, "float16", "qr")


def test_numpy_has_no_bfloat16_and_quantile_no_half(probed):
    assert _error(probed, "bfloat16", "numpy") == "TypeError: Got unsupported ScalarType BFloat16"
    assert probed.check("cpu", "float16", "numpy").ok  # NumPy does have float16
    for dtype in HALF:
        assert "quantile() input tensor must be either float or double dtype" in _error(probed, dtype, "quantile")


def test_most_float8_operations_fail_but_storage_casts_work(probed):
    for dtype in FLOAT8:
        checks = [check for check in probed.checks if check.device == "cpu" and check.dtype == dtype]
        failed = [check for check in checks if not check.ok]
        assert len(failed) > len(checks) / 2
        assert "not implemented for 'Float8_" in _error(probed, dtype, "sign")
        for operation in ("cast_to_float32", "cast_from_float32", "safetensors"):
            assert probed.check("cpu", dtype, operation).ok


def test_matmul_speed_is_measured_per_dtype(probed):
    dtypes = ("float32", *HALF)
    speeds = [probed.speed("cpu", dtype, "matmul") for dtype in dtypes]
    assert all(speeds)
    for speed, dtype in zip(speeds, dtypes):
        assert speed.dtype == dtype and speed.seconds > 0
        assert speed.gflops == pytest.approx(2 * MATMUL_SIDE**3 / speed.seconds / 1e9)
    # Each dtype timed on its own, not one number copied to all. How the three compare is this CPU's business
    # (emulated bf16 is slower) and how busy the machine was while timing: capabilities' tests give it speeds.
    assert len({speed.seconds for speed in speeds}) == 3
    assert probed.speed("cpu", "float32", "svd").gflops > 0
    assert probed.speed("cpu", "float32", "elementwise").gbps > 0


def test_probe_imports_no_torch_in_the_parent():
    code = "import sys, guiapp.system.probe, guiapp.system.capabilities, guiapp.system.resources; " \
           "import guiapp.system.explain, guiapp.system.report; machine = guiapp.system.probe.machine_fingerprint(); " \
           "print('torch' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "False"


def _fake_child(tmp_path, body: str) -> list[str]:
    """A child process that writes the start of a real record stream, then does `body` (hang, crash…)."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys, time
        out = open(sys.argv[sys.argv.index("--out") + 1], "a")
        def write(**record):
            out.write(json.dumps(record) + "\\n"); out.flush()
        write(record="device", id="cpu", kind="cpu", name="test", memory_total=1, memory_free=1)
        write(record="check", device="cpu", dtype="float32", operation="matmul", ok=True, error=None, seconds=0.0)
        write(record="start", step="cpu float16 svd")
    """) + textwrap.dedent(body))
    return [sys.executable, str(script)]


def test_one_python_under_two_names_shares_one_probe():
    # The `mergesmith` launcher runs bin/python3, `python -m guiapp` bin/python: the same environment, one probe.
    bin_folder = Path(sys.executable).parent
    names = [name for name in ("python", "python3") if (bin_folder / name).exists()]
    if len(names) < 2:
        pytest.skip(f"this environment has only {names} in {bin_folder}")
    code = "import json, guiapp.system.probe as p; print(json.dumps(p.machine_fingerprint()))"
    prints = [subprocess.run([str(bin_folder / name), "-c", code], capture_output=True, text=True,
                             check=True).stdout for name in names]
    assert prints[0] == prints[1]


def test_a_hanging_child_is_stopped_and_reported(tmp_path):
    command = _fake_child(tmp_path, "time.sleep(600)\n")
    result = run_probe_child(command, {"machine": "test"}, timeout=3)
    assert result.duration_seconds < 30
    assert "stopped responding" in result.problem and "cpu float16 svd" in result.problem
    assert result.check("cpu", "float32", "matmul").ok  # what finished before the hang is kept
    assert result.check("cpu", "float16", "svd") is None


def test_a_crashing_child_is_reported(tmp_path):
    result = run_probe_child(_fake_child(tmp_path, "os.abort()\n"), {"machine": "test"}, timeout=30)
    assert "crashed" in result.problem and "SIGABRT" in result.problem and "cpu float16 svd" in result.problem
    assert result.devices[0]["id"] == "cpu"


def test_a_child_that_fails_says_why(tmp_path):
    body = "out.write('{\"record\": \"check\", \"dev'); out.flush()\nraise RuntimeError('driver exploded')\n"
    result = run_probe_child(_fake_child(tmp_path, body), {"machine": "test"}, timeout=30)
    assert "exit code 1" in result.problem and "RuntimeError: driver exploded" in result.problem
    assert len(result.checks) == 1  # the line cut short is skipped


def test_a_child_that_cannot_start_is_reported(tmp_path):
    result = run_probe_child([str(tmp_path / "missing-python")], {"machine": "test"}, timeout=5)
    assert "could not be started" in result.problem


@pytest.fixture
def small_probe(monkeypatch, tmp_path):
    """probe() with its cache in tmp_path and a real child limited to two checks, no timing (about 3 s a run)."""
    monkeypatch.setenv("MERGESMITH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(
        probe_module, "probe_child_command",
        lambda: probe_child_command(dtypes=["float32", "bfloat16"], operations=["svd"], timing=False),
    )


@pytest.mark.long
def test_the_cache_is_used_then_invalidated_by_a_new_torch_or_refresh(small_probe, monkeypatch, tmp_path):
    first = probe()
    assert first.problem is None and not first.check("cpu", "bfloat16", "svd").ok
    assert cache_file(machine_fingerprint()).parent == tmp_path / "cache"
    assert probe().probed_at == first.probed_at  # from the cache

    refreshed = probe(refresh=True)
    assert refreshed.probed_at > first.probed_at

    real_fingerprint = machine_fingerprint()
    monkeypatch.setattr(probe_module, "machine_fingerprint", lambda: {**real_fingerprint, "torch": "99.0+cu999"})
    upgraded = probe()
    assert upgraded.probed_at > refreshed.probed_at
    assert len(list((tmp_path / "cache").glob("probe-*.json"))) == 2


def test_a_damaged_or_foreign_cache_file_is_ignored(tmp_path):
    fingerprint = {"machine": "test"}
    path = tmp_path / "probe.json"
    path.write_text("{not json")
    assert load_cached(path, fingerprint) is None
    path.write_text(json.dumps(ProbeResult(fingerprint={"machine": "other"}).to_json()))
    assert load_cached(path, fingerprint) is None
    path.write_text(json.dumps(ProbeResult(fingerprint=fingerprint).to_json()))
    assert load_cached(path, fingerprint) == ProbeResult(fingerprint=fingerprint)
    path.write_text(json.dumps({**ProbeResult(fingerprint=fingerprint).to_json(), "format": 0}))
    assert load_cached(path, fingerprint) is None


def test_result_survives_a_json_round_trip(probed):
    assert ProbeResult.from_json(json.loads(json.dumps(probed.to_json()))) == probed


def test_the_dequantizers_of_every_quantized_format_run_on_the_cpu_and_the_report_says_so(probed):
    from guiapp.system.report import format_probe_report

    checks = {check.operation: check for check in probed.checks if check.device == "cpu" and check.dtype == "packed"}
    assert set(checks) == {"dequantize bitsandbytes 4-bit", "dequantize bitsandbytes 8-bit", "dequantize fp8",
                           "dequantize gptq / awq / compressed-tensors", "dequantize mxfp4"}
    assert all(check.ok for check in checks.values())
    report = format_probe_report(probed, verbose=True)
    assert ("Quantized models read on cpu: bitsandbytes 4-bit, bitsandbytes 8-bit, fp8, gptq / awq / "
            "compressed-tensors, mxfp4 (float8 has no arithmetic here: it is upcast to float32 first)") in report


def test_a_check_is_found_after_the_checks_grew_or_were_replaced_and_the_first_reported_wins():
    result = ProbeResult(fingerprint={})
    assert result.check("cpu", "float16", "matmul") is None
    failed = Check("cpu", "float16", "matmul", ok=False, error="RuntimeError: not implemented for 'Half'")
    result.checks.append(failed)
    assert result.check("cpu", "float16", "matmul") is failed
    result.checks.append(Check("cpu", "float16", "matmul", ok=True))
    assert result.check("cpu", "float16", "matmul") is failed
    passed = Check("cpu", "float16", "matmul", ok=True)
    result.checks = [passed, failed]
    assert result.check("cpu", "float16", "matmul") is passed
    assert result.check("cpu", "bfloat16", "matmul") is None
