"""Readable numbers for messages: byte sizes and durations."""

from __future__ import annotations


def format_bytes(count: float) -> str:
    """1536 → "1.5 KB", 25276510208 → "25.3 GB" (decimal units, as disks and the Hub show them)."""
    units = ("B", "KB", "MB", "GB", "TB")
    value, index = float(count), 0
    while abs(value) >= 1000 and index < len(units) - 1:
        value, index = value / 1000, index + 1
    return f"{value:.0f} B" if index == 0 else f"{value:.1f} {units[index]}"


def format_seconds(seconds: float) -> str:
    """42 → "42 s", 150 → "2 min 30 s", 7260 → "2 h 1 min"."""
    total = round(seconds)
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
