"""The report's figures of the event log: the lateness histogram, the late events per source
partition, the completeness curve and the recommended lateness bound.

The log's figures come from the reconciliation run's `reconciliation_partitions` rows
(`batch.partitions`: the only place they are computed): `figure_columns` adds to each row,
in SQL, its late rows per `LATENESS_BINS_MS` bin and per `CURVE_SHIFTS_MS` shift, and
`log_figures` sums them over the partitions. Late events there, as everywhere the report
counts them, are the ones the reconciliation counts: first arrivals of their event_id
(`tally.arrivals`), not repeats the stream classified as late after its dedup horizon.

The completeness curve comes from the caller (`ReportOptions.curve`: dicts with at least
`lateness_ms` and `completeness_pct`, e.g. `tally lateness-curve --json`'s "curve"). Without
one, it is estimated from the late side output: shifting the watermark down by D admits
exactly the late events with `lateness_ms < G + D` (G = allowed lateness), so completeness at
bound L + D is `1 - late events with lateness_ms >= G + D / batch events`. Without a known
current bound the chart says "not computed".
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from expectations.report_read import recorded_duration
from tally.completeness import meets_target
from tally.durations import format_duration
from tally.settings import setting_default

# Candidate shifts of the lateness bound for the estimated curve.
CURVE_SHIFTS_MS = (
    0,
    1_000,
    2_000,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
)
LATENESS_BINS_MS = (0, 1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000)
# The allowed lateness of a run that recorded none: the setting's default.
ALLOWED_LATENESS_DEFAULT_MS: int = setting_default("allowed_lateness")


def lateness_labels() -> list[str]:
    """The histogram's bin labels, one per `LATENESS_BINS_MS` bin: `0ms–1s`, ..., `≥ 30m`."""
    edges = list(LATENESS_BINS_MS)
    return [
        f"{format_duration(lo)}–{format_duration(hi)}" for lo, hi in itertools.pairwise(edges)
    ] + [f"≥ {format_duration(edges[-1])}"]


@dataclass(frozen=True)
class LateCounts:
    """The late events' figures: per `LATENESS_BINS_MS` bin, the events in it; per
    `CURVE_SHIFTS_MS` shift D, the events with `lateness_ms >= allowed + D` (None: the curve
    is not estimated)."""

    hist: list[tuple[str, int]]
    dropped: list[int] | None


@dataclass(frozen=True)
class LogFigures:
    """What the report shows of the event log, as the reconciliation wrote it
    (`reconciliation_partitions`, `batch.partitions`): the late events' counts and, per source
    partition, `partition`, `events`, `late` and `rate`."""

    counts: LateCounts
    partitions: list[dict[str, Any]]


def _late_rows_where(condition: str) -> str:
    """SQL: a `reconciliation_partitions` row's late rows whose `x.lateness_ms` matches."""
    return f"aggregate(lateness, 0L, (a, x) -> a + IF({condition}, x.late_rows, 0L))"


def _bin_condition(i: int) -> str:
    """SQL: `x.lateness_ms` falls in bin `i` of `LATENESS_BINS_MS` (null: the last bin)."""
    edges = LATENESS_BINS_MS
    if i == len(edges) - 1:
        return f"x.lateness_ms IS NULL OR x.lateness_ms >= {edges[i]}"
    below = f"x.lateness_ms < {edges[i + 1]}"
    return below if i == 0 else f"x.lateness_ms >= {edges[i]} AND {below}"


def figure_columns(allowed_ms: int | None) -> list[str]:
    """SQL over a `reconciliation_partitions` row: its `partition`, `events`, `late_events`,
    its late rows per histogram bin (`b<i>`) and, with `allowed_ms`, those at or beyond each
    estimated bound (`d<i>`: `lateness_ms >= allowed_ms + CURVE_SHIFTS_MS[i]`)."""
    shifts = [] if allowed_ms is None else [allowed_ms + d for d in CURVE_SHIFTS_MS]
    return [
        "partition",
        "events",
        "late_events",
        *[f"{_late_rows_where(_bin_condition(i))} AS b{i}" for i in range(len(LATENESS_BINS_MS))],
        *[f"{_late_rows_where(f'x.lateness_ms >= {ms}')} AS d{i}" for i, ms in enumerate(shifts)],
    ]


def log_figures(rows: Sequence[Any], allowed_ms: int | None) -> LogFigures:
    """The figures of the run's `reconciliation_partitions` rows, selected with
    `figure_columns(allowed_ms)`: the late counts summed over the partitions, and each
    partition with events, by partition (none: every count 0)."""
    labels = lateness_labels()
    counts = LateCounts(
        [(label, sum(int(r[f"b{i}"]) for r in rows)) for i, label in enumerate(labels)],
        None
        if allowed_ms is None
        else [sum(int(r[f"d{i}"]) for r in rows) for i in range(len(CURVE_SHIFTS_MS))],
    )
    partitions = [
        {
            "partition": r["partition"],
            "events": int(r["events"]),
            "late": int(r["late_events"]),
            "rate": int(r["late_events"]) / int(r["events"]),
        }
        for r in sorted(rows, key=lambda r: (r["partition"] is not None, r["partition"]))
        if r["events"]  # rows of partitions with only late rows of the windows, or only repeats
    ]
    return LogFigures(counts, partitions)


def curve_allowed_ms(
    given: Sequence[dict[str, Any]] | None, current_bound_ms: int | None, settings: dict[str, Any]
) -> int | None:
    """The allowed lateness the estimated curve counts from: the run's recorded one, else the
    setting's default; None when it is not estimated (a curve given, or no current bound)."""
    if given or current_bound_ms is None:
        return None
    allowed_ms = recorded_duration(settings, "allowed_lateness")
    return ALLOWED_LATENESS_DEFAULT_MS if allowed_ms is None else allowed_ms


def estimated_curve(dropped: list[int], batch_events: int, current_ms: int) -> list[dict[str, Any]]:
    """Completeness at bound current + D for each candidate shift D (see module docstring),
    `dropped[i]`: the late events at or beyond the allowed lateness + `CURVE_SHIFTS_MS[i]`."""
    curve = []
    for shift, dropped_n in zip(CURVE_SHIFTS_MS, dropped, strict=True):
        admitted = batch_events - dropped_n
        curve.append(
            {
                "lateness_ms": current_ms + shift,
                "lateness": format_duration(current_ms + shift),
                "events": batch_events,
                "admitted": admitted,
                "dropped": dropped_n,
                "completeness_pct": 100.0 * admitted / batch_events if batch_events else 100.0,
            }
        )
    return curve


def completeness_curve(
    given: Sequence[dict[str, Any]] | None,
    counts: LateCounts | None,
    batch_events: int,
    current_bound_ms: int | None,
) -> tuple[list[dict[str, Any]] | None, str]:
    """The curve to draw and where it comes from: the caller's, else estimated."""
    if given:
        return [dict(c) for c in given], "given"
    if counts is None or counts.dropped is None or current_bound_ms is None:
        return None, "not computed"
    curve = estimated_curve(counts.dropped, batch_events, current_bound_ms)
    return curve, "estimated from the late side output"


def _recommend(curve: list[dict[str, Any]], target: float | None) -> int | None:
    if target is None:
        return None
    for entry in sorted(curve, key=lambda e: e["lateness_ms"]):
        admitted, events = entry.get("admitted"), entry.get("events")
        if admitted is not None and events is not None:
            if meets_target(int(admitted), int(events), target):
                return int(entry["lateness_ms"])
        elif float(entry["completeness_pct"]) >= target:
            return int(entry["lateness_ms"])
    return None


def recommended_bound(
    given_ms: int | None, curve: list[dict[str, Any]] | None, target: float | None
) -> int | None:
    """The caller's recommended bound, else the smallest of the curve meeting `target`."""
    if given_ms is None and curve:
        return _recommend(curve, target)
    return given_ms
