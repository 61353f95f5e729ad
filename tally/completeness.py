"""Completeness of a lateness bound: the share of a day's events it admits, against the
setting `completeness_target` (percent). Pure: the lateness curve, the weekly tuning, the
stream's adaptive lateness and the report compare with these."""

from __future__ import annotations

from fractions import Fraction
from typing import Any


def meets_target(admitted: int, events: int, target: float) -> bool:
    """Completeness `100 · admitted / events` reaches `completeness_target`, exactly (the
    target read as the decimal it prints as; no events is complete). The one place the target
    is compared: the lateness curve, the tuning and the report use it."""
    if events == 0:
        return True
    return Fraction(100 * admitted, events) >= Fraction(repr(float(target)))


def recommend(curve: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """The entry with the smallest L whose completeness reaches `target` (percent), exactly;
    None if no L in the curve does. Completeness never falls as L grows."""
    for entry in sorted(curve, key=lambda e: e["lateness_ms"]):
        if meets_target(entry["admitted"], entry["events"], target):
            return entry
    return None
