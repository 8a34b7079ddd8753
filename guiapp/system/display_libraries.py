"""Which system libraries Qt's X11 (xcb) platform plugin needs, read from the plugin itself, and which are missing;
and whether the X display named by DISPLAY answers at all (Qt aborts the process when it does not).

Qt aborts with "Could not load the Qt platform plugin xcb" when one of them is absent, naming at best the first
one it thought of. Reading the plugin's ELF dynamic section (DT_NEEDED entries) and those of the Qt libraries
bundled with PySide6 that it links gives the whole list for the installed Qt, so the start-up check can name
every missing library and the package that provides it. Pure Python: no Qt import, no external tool required.
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import socket
import struct
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

# soname → (Debian/Ubuntu package, Fedora package) for what a minimal or headless system typically lacks.
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libz.so.1": ("zlib1g", "zlib"),
    "libzstd.so.1": ("libzstd1", "libzstd"),
}

_DEFAULT_FOLDERS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib")
_DT_NEEDED, _DT_STRTAB = 1, 5
_PT_LOAD, _PT_DYNAMIC = 1, 2


def needed_libraries(library: Path) -> list[str]:
    """The sonames `library` links (its DT_NEEDED entries, in order).

    Raises ValueError when the file is not an ELF shared object this reader understands, OSError when it cannot
    be read.
    """
    with open(library, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return _needed(data, library)


def _needed(data: mmap.mmap, library: Path) -> list[str]:
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise ValueError(f"{library} is not an ELF file")
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    header = struct.Struct(order + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH"))
    _, _, _, _, phoff, _, _, _, phentsize, phnum, _, _, _ = header.unpack_from(data, 16)
    program = struct.Struct(order + ("IIQQQQQQ" if wide else "IIIIIIII"))
    loads, dynamic = [], None
    for index in range(phnum):
        fields = program.unpack_from(data, phoff + index * phentsize)
        # 64-bit: type, flags, offset, vaddr, paddr, filesz, …; 32-bit: type, offset, vaddr, paddr, filesz, …
        kind, offset, vaddr, filesz = (fields[0], fields[2], fields[3], fields[5]) if wide else fields[:3] + (fields[4],)
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return []
    entry = struct.Struct(order + ("qQ" if wide else "iI"))
    needed, strtab = [], None
    for position in range(dynamic[0], dynamic[0] + dynamic[1], entry.size):
        tag, value = entry.unpack_from(data, position)
        if tag == 0:
            break
        if tag == _DT_NEEDED:
            needed.append(value)
        elif tag == _DT_STRTAB:
            strtab = value
    if strtab is None:
        raise ValueError(f"{library} has a dynamic section without a string table")
    table = _file_offset(strtab, loads, library)
    return [data[table + name:data.find(b"\0", table + name)].decode() for name in needed]


def _file_offset(address: int, loads: Sequence[tuple[int, int, int]], library: Path) -> int:
    for vaddr, offset, filesz in loads:
        if vaddr <= address < vaddr + filesz:
            return address - vaddr + offset
    raise ValueError(f"{library}: the string table lies outside the file's loaded segments")


def loader_folders() -> list[Path]:
    """The folders the dynamic loader searches: LD_LIBRARY_PATH, those of its cache (`ldconfig -p`), the defaults."""
    folders = [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        folders += [Path(line.rpartition("=> ")[2]).parent for line in listing.splitlines() if "=> " in line]
        break
    folders += [Path(p) for p in _DEFAULT_FOLDERS]
    return list(dict.fromkeys(folders))


X_TCP_PORT = 6000  # display N listens on port 6000 + N
X_SOCKET_FOLDER = "/tmp/.X11-unix"


def display_answers(display: str, timeout: float = 2.0) -> bool:
    """Whether an X server accepts a connection at `display` (DISPLAY's value: ":0", "unix:1.0", "host:10.0").

    Only the connection is tried, not the sign-in to the server: Qt does that with the user's credentials. A
    value this cannot read counts as answering, so that Qt gets to say what is wrong with it. Never raises.
    """
    host, _, rest = display.rpartition(":")
    number = rest.split(".", 1)[0]
    if not number.isdigit():
        return True
    if host in ("", "unix"):
        path = f"{X_SOCKET_FOLDER}/X{number}"
        addresses = [(socket.AF_UNIX, "\0" + path), (socket.AF_UNIX, path)]  # Linux's abstract socket first
    else:
        addresses = [(socket.AF_INET6 if ":" in host else socket.AF_INET, (host.strip("[]"), X_TCP_PORT + int(number)))]
    for family, address in addresses:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as connection:
                connection.settimeout(timeout)
                connection.connect(address)
                return True
        except OSError:
            continue
    return False


def xcb_plugin() -> Path | None:
    """PySide6's xcb platform plugin (found without importing Qt), or None when PySide6 or the plugin is absent."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    plugin = Path(next(iter(spec.submodule_search_locations))) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def missing_libraries(plugin: Path, folders: Iterable[Path] | None = None) -> list[str]:
    """The sonames `plugin` needs, directly or through the Qt libraries bundled beside it, that are in none of
    `folders` (default: where the loader looks), in the order they are first needed.

    Raises ValueError/OSError as `needed_libraries` does when the plugin or a bundled library cannot be read.
    """
    bundled = plugin.parent.parent.parent / "lib"  # PySide6/Qt/plugins/platforms → PySide6/Qt/lib
    search = list(folders) if folders is not None else loader_folders()
    missing: list[str] = []
    seen: set[str] = set()
    pending = [plugin]
    while pending:
        for soname in needed_libraries(pending.pop(0)):
            if soname in seen:
                continue
            seen.add(soname)
            if (bundled / soname).is_file():
                pending.append(bundled / soname)
            elif not any((folder / soname).exists() for folder in search):
                missing.append(soname)
    return missing


def install_advice(missing: Sequence[str]) -> str:
    """How to install `missing` sonames: Debian/Ubuntu and Fedora commands, then any soname without a known package."""
    known = [soname for soname in missing if soname in PACKAGES]
    unknown = [soname for soname in missing if soname not in PACKAGES]
    lines = []
    if known:
        debian = " ".join(dict.fromkeys(PACKAGES[s][0] for s in known))
        fedora = " ".join(dict.fromkeys(PACKAGES[s][1] for s in known))
        lines += [f"  Debian/Ubuntu: sudo apt install {debian}", f"  Fedora: sudo dnf install {fedora}"]
    for soname in unknown:
        lines.append(f"  {soname}: install the package that provides it "
                     f"(Debian/Ubuntu: apt-file search {soname}; Fedora: dnf provides '*/{soname}')")
    return "\n".join(lines)
