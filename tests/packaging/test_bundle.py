"""The double-click app, for real: packaging/build.py builds the bundle from this checkout, and the bundled
executable runs the window's self-test, the CLI and the capability probe (a child process of the frozen app).

Slow (a build takes minutes): `pytest -m slow tests/packaging`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

import pytest

from guiapp import __version__
from tests.packaging.helpers import ROOT, exec_path, load_script, run_installer, validate_desktop_file

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CI builds and runs the Linux bundle"),
]

# NVIDIA's libraries and torch's CUDA parts, by file name (libcudart.so.12, cublas64_12.dll, libtorch_cuda.so, …).
CUDA_LIBRARY = re.compile(
    r"^(lib)?(cuda|cudart|cudnn|cublas|cufft|cufile|curand|cusolver|cusparse|cupti|nccl|nvrtc|nvjitlink|nvtoolsext"
    r"|nvshmem|torch_cuda|c10_cuda|caffe2_nvrtc)",
    re.I,
)
SHARED_LIBRARY = re.compile(r"\.(so(\.\d+)*|dll|dylib)$")
TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test(\.so)?$)")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "build.py"), "--dist", str(out / "dist"), "--work", str(out / "work")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    print(f"\nbuild.py: {time.monotonic() - started:.0f} s\n{result.stdout}")
    return out / "dist"


@pytest.fixture(scope="module")
def app(build):
    return build / "Mergesmith"


def run_app(app, *args, env=None, timeout=600):
    environment = {**os.environ, "QT_QPA_PLATFORM": "offscreen", **(env or {})}
    return subprocess.run([str(app / "mergesmith"), *args], capture_output=True, text=True, env=environment, timeout=timeout)


def test_bundled_app_passes_its_self_test(app):
    started = time.monotonic()
    result = run_app(app, "--self-test")
    print(f"\n--self-test: {time.monotonic() - started:.1f} s")
    assert result.returncode == 0, result.stdout + result.stderr


def test_bundled_app_opens_its_window_on_x11(app):
    # A real X server (Xvfb) and Qt's xcb plugin, as on a desktop, with the X11 libraries the bundle carries.
    xvfb_run = shutil.which("xvfb-run")
    assert xvfb_run, "xvfb-run is missing: apt-get install xvfb xauth"
    environment = {key: value for key, value in os.environ.items() if key not in ("DISPLAY", "WAYLAND_DISPLAY")}
    result = subprocess.run(
        [xvfb_run, "-a", str(app / "mergesmith"), "--self-test"],
        capture_output=True, text=True, env={**environment, "QT_QPA_PLATFORM": "xcb"}, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_bundle_carries_the_x11_libraries_qt_needs(app):
    build_script = load_script(ROOT / "packaging" / "build.py")
    assert all(any(app.rglob(name)) for name in build_script.X11_LIBRARIES), "install them on the build machine (see build.py)"


def test_bundled_cli_answers(app):
    result = run_app(app, "--version")
    assert result.returncode == 0 and result.stdout.strip() == f"mergesmith {__version__}", result.stderr


def test_bundled_probe_runs_its_child_process(app, tmp_path):
    # The probe starts `sys.executable -m guiapp.system.probe_child`; frozen, that is the bundled executable.
    result = run_app(app, "probe", "--json", "--refresh", env={"MERGESMITH_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert '"problem": null' in result.stdout, result.stdout[-2000:]
    assert '"float32"' in result.stdout


def test_bundled_app_compiles_its_dequantizing_loops(app, tmp_path):
    # llvmlite is in the bundle (numba brings it) and compiles the 4-bit and FP8 loops for this CPU there.
    from guiapp.checkpoints.quantized.compiled import four_bit_instructions

    result = run_app(app, "probe", "--verbose", env={"MERGESMITH_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    expected = (f"4-bit and FP8 models are dequantized by loops compiled for it ({four_bit_instructions()})"
                if four_bit_instructions() else "FP8 models are dequantized by a loop compiled for it")
    assert expected in result.stdout.strip().splitlines()[-1], result.stdout[-2000:]


def test_bundled_export_makes_k_quants_with_its_compiled_kernels(app, tmp_path):
    # numba is in the bundle and compiles the K-quants' kernels there (a frozen app keeps no numba cache): a q4_k_m
    # file, made by those kernels (not torch's), read back by gguf-py.
    import gguf

    from tests.gguf import models

    model = models.llama(tmp_path / "model")
    result = run_app(app, "export-gguf", str(model), str(tmp_path / "model.gguf"), "--type", "q4_k_m", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["k_quants"] == "compiled"
    types = {tensor.tensor_type.name for tensor in gguf.GGUFReader(tmp_path / "model.gguf").tensors}
    assert {"Q4_K", "Q6_K"} <= types


def _bundle_files(app):
    return [path.relative_to(app).as_posix() for path in app.rglob("*") if path.is_file()]


def test_bundle_has_no_test_files(app):
    assert not [name for name in _bundle_files(app) if TEST_FILE.search(name)]


def test_cpu_bundle_has_no_cuda_libraries(app):
    import torch

    assert torch.version.cuda is None, "this check is for the CPU build; the build environment has CUDA torch"
    libraries = [name for name in _bundle_files(app) if SHARED_LIBRARY.search(name)]
    assert any("libtorch_cpu" in name for name in libraries)
    assert not [name for name in libraries if CUDA_LIBRARY.search(name.rsplit("/", 1)[-1])]


def test_archive_unpacks_to_a_runnable_folder(build):
    (archive,) = build.glob(f"Mergesmith-{__version__}-linux-*-cpu.tar.gz")
    with tarfile.open(archive) as tar:
        members = {member.name: member for member in tar.getmembers()}
    assert members["Mergesmith/mergesmith"].mode & 0o111
    assert members["Mergesmith/install-desktop-entry.sh"].mode & 0o111
    assert "Mergesmith/_internal/resources/icons/mergesmith.svg" in members
    assert "Mergesmith/_internal/docs/recipes.md" in members  # Help › Recipe format
    assert all(name == "Mergesmith" or name.startswith("Mergesmith/") for name in members)


def test_menu_entry_installed_from_the_bundle_starts_it(app, tmp_path):
    data = tmp_path / "home" / ".local" / "share"
    result = run_installer(app / "install-desktop-entry.sh", data)
    assert result.returncode == 0, result.stderr
    entry = data / "applications" / "mergesmith.desktop"
    validate_desktop_file(entry)
    program = exec_path(entry)
    assert program == str(app / "mergesmith")
    assert subprocess.run([program, "--version"], capture_output=True).returncode == 0
