"""Durations as people write them (`500ms`, `10s`, `1m`, `1h`, `1d`) and as integer
milliseconds, both ways. Pure stdlib: the settings, the window arithmetic and the reports
share it (the settings import it, so it cannot import them)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class SettingsError(ValueError):
    """A bad setting: the message is one line and names the setting (`tally.settings`'s error,
    defined here because a duration is the first thing a setting is parsed as)."""


def parse_duration(text: str | int, name: str = "duration") -> int:
    """`500ms`, `10s`, `1m`, `1h`, `1d` (or a bare number of milliseconds) -> milliseconds."""
    if isinstance(text, bool):
        raise SettingsError(f"{name}: expected a duration like 500ms, 10s, 1m or 1h, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise SettingsError(f"{name}: must not be negative, got {text}")
        return text
    match = _DURATION.match(str(text))
    if not match:
        raise SettingsError(f"{name}: expected a duration like 500ms, 10s, 1m or 1h, got {text!r}")
    number, unit = match.groups()
    if unit is None and number != "0":
        raise SettingsError(f"{name}: {text!r} has no unit; write e.g. {number}s or {number}ms")
    return int(number) * _UNIT_MS[unit or "ms"]


def parse_duration_list(text: str, name: str = "durations") -> list[int]:
    """`0s,2s,5s` -> [0, 2000, 5000]; SettingsError naming the setting otherwise."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise SettingsError(f"{name}: expected a list like 0s,2s,5s, got {text!r}")
    return [parse_duration(p, name) for p in parts]


def format_duration(ms: int) -> str:
    """Milliseconds in the largest unit that divides them (`90000` -> `90s`; 0 -> `0ms`)."""
    for unit in ("d", "h", "m", "s"):
        if ms and ms % _UNIT_MS[unit] == 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


LATENESS_AUTO = "auto"


def parse_lateness(text: str | int | None, name: str = "lateness") -> int | None:
    """A duration, or `auto` (None: adaptive lateness, docs/semantics.md)."""
    if text is None or (isinstance(text, str) and text.strip().lower() == LATENESS_AUTO):
        return None
    return parse_duration(text, name)
