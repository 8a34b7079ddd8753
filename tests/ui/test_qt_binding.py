"""The installed Qt binding must not corrupt reference counts when Python emits signals (PySide6 6.12.0 does:
every emit drops a reference to True, and a window that runs a while then crashes)."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal


class _Emitter(QObject):
    said = Signal(str)


def test_emitting_signals_keeps_reference_counts(qtbot):
    emitter = _Emitter()
    heard = []
    emitter.said.connect(heard.append)
    before = sys.getrefcount(True), sys.getrefcount(False), sys.getrefcount(None)
    for _ in range(200):
        emitter.said.emit("x")
    after = sys.getrefcount(True), sys.getrefcount(False), sys.getrefcount(None)
    assert len(heard) == 200
    assert all(a >= b - 10 for a, b in zip(after, before)), (before, after)
