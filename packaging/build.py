"""Build the Mergesmith app folder for this OS with PyInstaller, then archive it.

    .venv/bin/pip install -e '.[package]'
    .venv/bin/python packaging/build.py            # → dist/Mergesmith/ and dist/Mergesmith-<version>-<os>-<arch>-<variant>.tar.gz|zip

The torch installed in this environment decides the variant: a CPU build of torch gives the CPU app, a CUDA
build the CUDA app (see docs/install.md). Prints the build time and the folder and archive sizes.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "packaging" / "mergesmith.spec"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the Mergesmith app folder and its archive.")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="Where the app and archive go (default: dist/).")
    parser.add_argument("--work", type=Path, default=ROOT / "build", help="PyInstaller's work folder (default: build/).")
    parser.add_argument("--no-archive", action="store_true", help="Build the folder only.")
    args = parser.parse_args(argv)

    try:
        import PyInstaller  # noqa: F401, PLC0415 - only to say how to get it
    except ImportError:
        print("PyInstaller is not installed here. Run: pip install -e '.[package]'", file=sys.stderr)
        return 1

    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
         "--distpath", str(args.dist), "--workpath", str(args.work), str(SPEC)],
        check=True,
    )
    app = args.dist / ("Mergesmith.app" if sys.platform == "darwin" else "Mergesmith")
    print(f"Built {app} in {time.monotonic() - started:.0f} s: {folder_size(app) / 1e6:.0f} MB")
    warn_about_missing_x11_libraries(app)

    if not args.no_archive:
        started = time.monotonic()
        archive = make_archive(app, args.dist / archive_stem())
        print(f"Archived {archive} in {time.monotonic() - started:.0f} s: {archive.stat().st_size / 1e6:.0f} MB")
    return 0


# Qt's X11 plugin needs these and many desktops lack some of them. PyInstaller bundles a library only when the
# build machine has it, so a build without them makes an app whose window opens only where they are installed.
X11_LIBRARIES = ("libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1")


def warn_about_missing_x11_libraries(app: Path) -> None:
    if not sys.platform.startswith("linux"):
        return
    missing = [name for name in X11_LIBRARIES if not any(app.rglob(name))]
    if missing:
        print(
            f"Warning: {', '.join(missing)} not found on this machine, so not bundled: the window will only open on"
            " X11 desktops that have them. Install them and build again:"
            " apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1",
            file=sys.stderr,
        )


def archive_stem() -> str:
    from guiapp import __version__  # noqa: PLC0415

    system = {"linux": "linux", "darwin": "macos", "win32": "windows"}.get(sys.platform, sys.platform)
    return f"Mergesmith-{__version__}-{system}-{platform.machine().lower()}-{torch_variant()}"


def torch_variant() -> str:
    """cpu, cuda12.8, rocm6.3 … as the bundled torch was built (asked of a child: importing torch takes seconds)."""
    code = (
        "import torch; v = torch.version;"
        "print(f'cuda{v.cuda}' if v.cuda else f'rocm{v.hip.split(\"-\")[0]}' if getattr(v, 'hip', None) else 'cpu')"
    )
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def make_archive(app: Path, stem: Path) -> Path:
    """tar.gz on Linux (keeps the executable bits and symlinks), zip elsewhere (what Windows and macOS open)."""
    if sys.platform.startswith("linux"):
        archive = stem.with_name(stem.name + ".tar.gz")
        with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
            tar.add(app, arcname=app.name)
    elif sys.platform == "darwin":
        # ditto keeps the .app's symlinks and extended attributes, which zipfile would lose.
        archive = stem.with_name(stem.name + ".zip")
        subprocess.run(["ditto", "-c", "-k", "--keepParent", str(app), str(archive)], check=True)
    else:
        archive = stem.with_name(stem.name + ".zip")
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zip_file:
            for path in sorted(app.rglob("*")):
                zip_file.write(path, path.relative_to(app.parent))
    return archive


def folder_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


if __name__ == "__main__":
    sys.exit(main())
