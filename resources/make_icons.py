"""Generate Mergesmith's icon set into resources/icons/ (the generated files are committed).

    .venv/bin/python resources/make_icons.py

The SVG is written as text (it is the source of every other size); the PNGs are rendered from it with Qt's SVG
renderer offscreen, and the Windows .ico and macOS .icns are assembled here from those PNGs (both formats accept
PNG images inside), so no image library beyond PySide6 is needed. Run it again after changing the drawing.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

ICON_DIR = Path(__file__).resolve().parent / "icons"
NAME = "mergesmith"

# Sizes of the freedesktop hicolor theme folders the Linux installer copies to (hicolor/NxN/apps).
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
# Windows picks from these for the taskbar, Explorer views and the title bar (256 is the largest it uses).
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# macOS types for PNG payloads; ic10 is the 1024 px ("512@2x") image Retina Finder views use.
ICNS_TYPES = ((b"icp4", 16), (b"icp5", 32), (b"icp6", 64), (b"ic07", 128), (b"ic08", 256), (b"ic09", 512), (b"ic10", 1024))

# Two streams (amber and teal) flowing into one white line ending in a dot: two models in, one model out.
# Strokes are wide so the shape still reads at 16 px.
SVG = """<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="256" height="256" viewBox="0 0 256 256">
  <title>Mergesmith</title>
  <defs>
    <linearGradient id="background" x1="0" y1="0" x2="0" y2="1">
      <stop offset="0" stop-color="#34467e"/>
      <stop offset="1" stop-color="#1a2242"/>
    </linearGradient>
  </defs>
  <rect x="8" y="8" width="240" height="240" rx="52" ry="52" fill="url(#background)"/>
  <path d="M 52 70 C 100 70 108 128 150 128" fill="none" stroke="#f5a623" stroke-width="26" stroke-linecap="round"/>
  <path d="M 52 186 C 100 186 108 128 150 128" fill="none" stroke="#3ec7b5" stroke-width="26" stroke-linecap="round"/>
  <path d="M 140 128 L 176 128" fill="none" stroke="#ffffff" stroke-width="26" stroke-linecap="round"/>
  <circle cx="196" cy="128" r="24" fill="#ffffff"/>
</svg>
"""


def render_png(svg_path: Path, size: int) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    QGuiApplication.instance() or QGuiApplication([])
    renderer = QSvgRenderer(str(svg_path))
    if not renderer.isValid():
        raise SystemExit(f"Qt could not read {svg_path}")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data.data())


def ico_file(pngs: dict[int, bytes]) -> bytes:
    """An .ico holding the PNG images: a 6-byte header, a 16-byte entry per image, then the images."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = len(header) + 16 * len(sizes)
    entries, images = b"", b""
    for size in sizes:
        data = pngs[size]
        side = size if size < 256 else 0  # the format stores 256 as 0
        entries += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(data), offset)
        images += data
        offset += len(data)
    return header + entries + images


def icns_file(pngs: dict[int, bytes]) -> bytes:
    """An .icns holding the PNG images: 'icns' + total length, then (type, length, data) per image."""
    body = b"".join(kind + struct.pack(">I", 8 + len(pngs[size])) + pngs[size] for kind, size in ICNS_TYPES)
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    ICON_DIR.mkdir(exist_ok=True)
    svg_path = ICON_DIR / f"{NAME}.svg"
    svg_path.write_text(SVG, encoding="utf-8")
    wanted = sorted({*PNG_SIZES, *ICO_SIZES, *(size for _, size in ICNS_TYPES)})
    pngs = {size: render_png(svg_path, size) for size in wanted}
    for size in PNG_SIZES:
        (ICON_DIR / f"{NAME}-{size}.png").write_bytes(pngs[size])
    (ICON_DIR / f"{NAME}.ico").write_bytes(ico_file({size: pngs[size] for size in ICO_SIZES}))
    (ICON_DIR / f"{NAME}.icns").write_bytes(icns_file(pngs))
    print(f"Wrote the icon set to {ICON_DIR}")


if __name__ == "__main__":
    main()
