"""`mergesmith probe` and `mergesmith explain` as a user runs them, in a separate process."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from guiapp.system.probe import cache_file, machine_fingerprint, store
from tests.support import warm_cli


def mergesmith(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`python -m guiapp ARGS` in a process of its own, forked from the warm CLI (torch already imported)."""
    return warm_cli.shared().run(args, stdin=stdin, timeout=120)


def test_explain_recognises_pasted_text_and_exits_zero():
    run = mergesmith("explain", "RuntimeError: \"svd_cuda_gesvdj\" not implemented for 'BFloat16'")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("SVD or QR cannot run in half precision")
    assert "What to do:" in run.stdout and "Details:" in run.stdout


def test_explain_reads_a_traceback_from_stdin():
    traceback_text = "Traceback (most recent call last):\n  File \"x.py\", line 1\nTypeError: Got unsupported " \
                     "ScalarType BFloat16\n"
    run = mergesmith("explain", "-", stdin=traceback_text)
    assert run.returncode == 0 and "NumPy cannot hold bfloat16 tensors" in run.stdout


def test_explain_admits_what_it_does_not_know_and_exits_one():
    run = mergesmith("explain", "ZeroDivisionError: division by zero")
    assert run.returncode == 1
    assert run.stdout.startswith("Mergesmith does not recognise this error")
    assert mergesmith("explain", "-", stdin="   \n").returncode == 2


def test_explain_never_imports_torch():
    code = ("import sys; from guiapp.__main__ import main; code = main(['explain', 'CUDA out of memory']); "
            "print('torch' in sys.modules, code, file=sys.stderr)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stderr.strip().splitlines()[-1] == "False 0"


def test_probe_prints_the_cached_matrix(probed, tmp_path, monkeypatch):
    monkeypatch.setenv("MERGESMITH_CACHE_DIR", str(tmp_path))
    store(probed, cache_file(machine_fingerprint()))  # so the command shows this session's probe without re-probing
    table = mergesmith("probe", "--verbose")
    assert table.returncode == 0, table.stderr
    assert "Failures on cpu" in table.stdout
    assert "svd in bfloat16: NotImplementedError: \"linalg_svd_cpu\" not implemented for 'BFloat16'" in table.stdout
    assert "bfloat16 (computed in float32)" in table.stdout and "GFLOP/s" in table.stdout
    assert table.stdout.strip().splitlines()[-1].startswith("On the CPU, ")  # what dequantizes quantized models
    as_json = mergesmith("probe", "--json")
    assert json.loads(as_json.stdout)["probed_at"] == probed.probed_at


def test_probe_reports_an_unfinished_probe_and_exits_one(probed, tmp_path, monkeypatch):
    monkeypatch.setenv("MERGESMITH_CACHE_DIR", str(tmp_path))
    unfinished = dataclasses.replace(
        probed, checks=probed.checks[:10],
        problem="The probe crashed (killed by signal SIGSEGV) while testing cpu float64 qr. Combinations not "
        "tested are treated as unavailable.")
    store(unfinished, cache_file(machine_fingerprint()))
    table = mergesmith("probe")
    assert table.returncode == 1
    assert "Problem: The probe crashed (killed by signal SIGSEGV)" in table.stdout
    assert "mergesmith probe --refresh" in table.stdout
    assert "?" in mergesmith("probe", "--verbose").stdout  # what was not tested, in the matrix


def test_probe_leads_with_the_verdict_and_keeps_the_matrix_for_verbose(probed, tmp_path, monkeypatch):
    monkeypatch.setenv("MERGESMITH_CACHE_DIR", str(tmp_path))
    store(probed, cache_file(machine_fingerprint()))
    short = mergesmith("probe")
    assert short.returncode == 0, short.stderr
    lines = short.stdout.strip().splitlines()
    verdict = next(line for line in lines if line.startswith("On this CPU"))
    assert "store in bfloat16" in verdict and "half the size of float32" in verdict and "float32" in verdict
    assert lines.index(verdict) <= 2  # the answer first, after the line saying when the probe ran
    assert len(lines) <= 25, short.stdout
    assert "float8" not in short.stdout and "f8_" not in short.stdout and "Error" not in short.stdout
    assert "--verbose" in short.stdout  # says where the rest is
    verbose = mergesmith("probe", "--verbose").stdout
    assert verdict in verbose and "Failures on cpu" in verbose and "GFLOP/s" in verbose
