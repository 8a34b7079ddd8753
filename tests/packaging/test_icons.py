"""The icon set: every declared size exists, the committed SVG is what make_icons.py draws, and Qt's own
readers (not our writer) find the declared images inside the .ico and .icns."""

from __future__ import annotations

import pytest

from tests.packaging.helpers import ICONS, RESOURCES, load_script, png_size

make_icons = load_script(RESOURCES / "make_icons.py")


def test_the_committed_svg_is_the_one_the_script_draws():
    assert (ICONS / "mergesmith.svg").read_text(encoding="utf-8") == make_icons.SVG


@pytest.mark.parametrize("size", make_icons.PNG_SIZES)
def test_png_has_its_declared_size(size):
    assert png_size((ICONS / f"mergesmith-{size}.png").read_bytes()) == (size, size)


def _sizes_qt_reads(path):
    from PySide6.QtGui import QImageReader

    reader = QImageReader(str(path))
    assert reader.canRead(), f"Qt cannot read {path.name}: {reader.errorString()}"
    sizes = []
    for index in range(reader.imageCount()):
        reader.jumpToImage(index)
        image = reader.read()
        assert not image.isNull(), reader.errorString()
        sizes.append(image.width())
        assert image.height() == image.width()
    return sorted(sizes)


def test_ico_holds_every_windows_size(qapp):
    assert _sizes_qt_reads(ICONS / "mergesmith.ico") == sorted(make_icons.ICO_SIZES)


def test_icns_holds_every_macos_size(qapp):
    assert _sizes_qt_reads(ICONS / "mergesmith.icns") == sorted(size for _, size in make_icons.ICNS_TYPES)


def test_svg_renders(qapp):
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(ICONS / "mergesmith.svg"))
    assert renderer.isValid() and renderer.defaultSize().width() == 256
