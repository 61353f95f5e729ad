"""How the report writes numbers and tables (shared by the markdown and the chart)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ENGINE_ORDER = (
    "tally",
    "durable",
    "agg",
    "batch",
    "tally_prev",
    "agg_prev",
    "tally_currencies",  # absent from runs before currencies
)


def number(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def secs(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.2f}" if value < 10 else f"{value:,.1f}"


def ms_as_secs(value: float | None) -> str:
    return "–" if value is None else f"{value / 1000:,.1f} s"


def megabytes(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f} MB"


def verdict(flag: bool | None) -> str:
    return "–" if flag is None else ("**met**" if flag else "**missed**")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def duration(ms: int) -> str:
    from tally.durations import format_duration

    return format_duration(ms)


def engine_labels() -> dict[str, str]:
    from bench.speed import ENGINE_LABELS

    return ENGINE_LABELS
