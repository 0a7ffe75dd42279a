"""Durations on the command line: ``30d``, ``12h``, ``90m``, ``45s`` or a sum like ``1d12h``."""

from __future__ import annotations

import re

__all__ = ["format_duration", "parse_duration"]

_UNITS = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (e.g. ``30d``, ``1h30m``); ValueError when it is not a duration."""
    value = text.strip().lower()
    if not value:
        raise ValueError("empty duration")
    position = 0
    seconds = 0.0
    for match in _PART.finditer(value):
        if match.start() != position:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(value):
        raise ValueError(f"expected a duration such as 30d, 12h or 90m, got {text!r}")
    if seconds <= 0:
        raise ValueError(f"a duration must be positive, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` in the largest unit that divides it, e.g. 2592000 -> ``30d``."""
    for unit, size in _UNITS.items():
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
