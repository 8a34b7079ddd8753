"""Readable numbers for messages: byte sizes and durations."""

from __future__ import annotations

import math

UNDER_A_SECOND = "under a second"


def format_bytes(count: float) -> str:
    """1536 → "1.5 KB", 25276510208 → "25.3 GB" (decimal units, as disks and the Hub show them)."""
    units = ("B", "KB", "MB", "GB", "TB")
    value, index = float(count), 0
    while abs(value) >= 1000 and index < len(units) - 1:
        value, index = value / 1000, index + 1
    return f"{value:.0f} B" if index == 0 else f"{value:.1f} {units[index]}"


def format_seconds(seconds: float) -> str:
    """42 → "42 s", 150 → "2 min 30 s", 7260 → "2 h 1 min", 0.4 → "less than a second" (0 → "0 s")."""
    if 0 < seconds < 1:
        return "less than a second"
    total = round(seconds)
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def duration_range_bounds(low: float, high: float) -> tuple[float, float, str]:
    """The ends, in seconds, that `format_duration_range` says of a rough duration, and their unit ("s", "min",
    "h"; "" for "under a second" and "1 s"): rounded outwards, so a chart can shade exactly the range said."""
    low, high = max(0.0, min(low, high)), max(0.0, low, high)
    if high < 1:
        return 0.0, 1.0, ""
    if high < 1.5:
        return min(low, 1.0), 1.5, ""
    if high < 60:
        step, unit, size = (5 if high > 10 else 1), "s", 1
    elif high < 3600:
        step, unit, size = 1, "min", 60
    else:
        step, unit, size = 1, "h", 3600
    bottom = max(1, math.floor(low / size / step) * step)
    top = max(1, math.ceil(high / size / step) * step)
    return float(bottom * size), float(top * size), unit


def format_duration_range(low: float, high: float) -> str:
    """A duration that is only known roughly, in the unit of its upper end: (50, 110) → "1–2 min",
    (4, 9) → "4–9 s", (12, 33) → "10–35 s", (5000, 9000) → "1–3 h". Ends are rounded outwards, to whole units
    (seconds above 10 to fives), so the range never looks more precise than it is; below a second it is
    "under a second", and up to 1.5 s "1 s"."""
    bottom, top, unit = duration_range_bounds(low, high)
    if not unit:
        return UNDER_A_SECOND if top <= 1 else "1 s"
    size = {"s": 1, "min": 60, "h": 3600}[unit]
    bottom, top = round(bottom / size), round(top / size)
    return f"{top} {unit}" if bottom >= top else f"{bottom}–{top} {unit}"


def roughly(low: float, high: float) -> str:
    """A rough duration as a phrase: "about 1–2 min", or "under a second"."""
    text = format_duration_range(low, high)
    return text if text == UNDER_A_SECOND else f"about {text}"


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """The count with its noun in the right number: (1, "model") → "1 model", (3, "model") → "3 models",
    (2, "match", "matches") → "2 matches"."""
    return f"{count} {noun if count == 1 else plural_noun or noun + 's'}"


def three_digits(count: int) -> str:
    """A size to three significant digits in decimal units: 97216 → "97.2 KB", 4370000000 → "4.37 GB"."""
    value, units = float(count), ["B", "KB", "MB", "GB", "TB"]
    while value >= 999.5 and len(units) > 1:
        value /= 1000
        units.pop(0)
    return f"{value:.3g} {units[0]}"
