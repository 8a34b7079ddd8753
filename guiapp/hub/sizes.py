"""Byte counts as people read them."""

from __future__ import annotations


def format_bytes(count: float) -> str:
    """1536 -> "1.5 KB", 5_000_000_000 -> "4.7 GB" (binary multiples, the way file managers show sizes)."""
    value = float(count)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
