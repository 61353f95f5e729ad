"""The nightly diff of one business date in plain Python, for tumbling windows in UTC: the
reference the Spark job (`batch.reconcile`) is held to (tests/test_diff_model.py).

It reads the rows of `events`, `stream_aggregates` and `late_events` as the test fixtures
build them (times in epoch ms) and applies docs/semantics.md, *Nightly reconciliation*, as
written there, with none of the Spark job's shortcuts (no hashes, no index, no broadcast
sets): first arrivals over the whole log, the stream's highest revision, the late rows that
are first arrivals (each event_id once per window), the copies the stream counted (lines
that are not their id's first arrival, on_time or allowed_late, less the windows they have
a late row for), then residual = (batch − stream) − late + copies and the status.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ARRIVAL_ORDER = ("ingest_time", "batch_id", "source_mtime", "source_file", "source_line")
LINE = ("event_id", "app_id", "batch_id", "source_file", "source_line")
COUNTED = ("on_time", "allowed_late")

Pair = tuple[int, int]  # (count, amount)
WindowKey = tuple[int, str, str]  # (window_start ms, key, currency)
# The currency of a row that names none (rows from before currencies, the run's default).
DEFAULT_CURRENCY = "USD"


def _currency(row: Mapping[str, Any]) -> str:
    return row.get("currency") or DEFAULT_CURRENCY


@dataclass(frozen=True)
class DiffRow:
    stream: Pair
    batch: Pair
    late: Pair
    copies: Pair
    residual: Pair
    status: str


def _line(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in LINE)


def _add(totals: dict[WindowKey, list[int]], at: WindowKey, amount: int) -> None:
    pair = totals.setdefault(at, [0, 0])
    pair[0] += 1
    pair[1] += amount


def first_rows(events: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each event_id's first arrival in the log (its row), in arrival order."""
    firsts: dict[str, Mapping[str, Any]] = {}
    for row in sorted(events, key=lambda r: tuple(r[c] for c in ARRIVAL_ORDER)):
        if row["event_id"] is not None:
            firsts.setdefault(row["event_id"], row)
    return firsts


def status_of(in_stream: bool, s: Pair, b: Pair, late: Pair, copies: Pair, residual: Pair) -> str:
    no_late, no_copies = late == (0, 0), copies == (0, 0)
    if in_stream and s == b and no_late and no_copies:
        return "MATCH"
    if in_stream and residual == (0, 0) and not no_late and no_copies:
        return "EXPLAINED_BY_LATE"
    if in_stream and residual == (0, 0) and not no_copies:
        return "EXPLAINED_BY_COPIES"
    if not in_stream and b == late and not no_late and no_copies:
        return "MISSING_IN_STREAM"
    return "UNEXPLAINED"


def diff(
    events: list[Mapping[str, Any]],
    stream: list[Mapping[str, Any]],
    late: list[Mapping[str, Any]],
    day: tuple[int, int],
    window_ms: int,
) -> dict[WindowKey, DiffRow]:
    """The date's `reconciliation` rows (`day`: its [start, end) in ms) by (window, key,
    currency): amounts of two currencies are never added."""
    start, end = day

    def window_of(event_time: int) -> int:
        return event_time - event_time % window_ms

    firsts = first_rows(events)
    batch: dict[WindowKey, list[int]] = {}
    for row in firsts.values():
        at = (window_of(row["event_time"]), row["key"], _currency(row))
        if start <= at[0] < end:
            _add(batch, at, row["amount"])
    copies: dict[WindowKey, list[int]] = {}
    late_lines = {(_line(r), r["window_start"]) for r in late}
    for row in events:
        at = (window_of(row["event_time"]), row["key"], _currency(row))
        if (
            start <= at[0] < end
            and row["event_id"] is not None
            and _line(row) != _line(firsts[row["event_id"]])
            and row["arrival_status"] in COUNTED
            and (_line(row), at[0]) not in late_lines
        ):
            _add(copies, at, row["amount"])
    latest: dict[WindowKey, Mapping[str, Any]] = {}
    for row in stream:
        at = (row["window_start"], row["key"], _currency(row))
        if start <= at[0] < end and (
            at not in latest
            or (row["revision"], row["emit_time"], row["batch_id"])
            > (latest[at]["revision"], latest[at]["emit_time"], latest[at]["batch_id"])
        ):
            latest[at] = row
    explaining: dict[WindowKey, list[int]] = {}
    seen: set[tuple[str, int]] = set()
    for row in late:
        at = (row["window_start"], row["key"], _currency(row))
        first = firsts.get(row["event_id"]) if row["event_id"] is not None else None
        is_first = first is not None and _line(first) == _line(row)
        if start <= at[0] < end and is_first and (row["event_id"], at[0]) not in seen:
            seen.add((row["event_id"], at[0]))
            _add(explaining, at, row["amount"])
    rows: dict[WindowKey, DiffRow] = {}
    for at in set(batch) | set(latest) | set(explaining) | set(copies):
        s = (latest[at]["event_count"], latest[at]["amount_sum"]) if at in latest else (0, 0)
        b, lt, c = (tuple(t.get(at, (0, 0))) for t in (batch, explaining, copies))
        residual = (b[0] - s[0] - lt[0] + c[0], b[1] - s[1] - lt[1] + c[1])
        rows[at] = DiffRow(s, b, lt, c, residual, status_of(at in latest, s, b, lt, c, residual))  # type: ignore[arg-type]
    return rows


def by_window(rows: dict[WindowKey, DiffRow]) -> dict[WindowKey, DiffRow]:
    return dict(sorted(rows.items()))


def totals_by_currency(rows: Mapping[WindowKey, DiffRow]) -> dict[str, dict[str, int]]:
    """`totals` of each currency's rows: the summary's rows, one a currency."""
    currencies = sorted({at[2] for at in rows})
    return {c: totals(r for at, r in rows.items() if at[2] == c) for c in currencies}


def totals(rows: Iterable[DiffRow]) -> dict[str, int]:
    """The summary's gap, late, copies and explained figures."""
    out: dict[str, int] = defaultdict(int)
    for r in rows:
        out["gap_amount"] += r.batch[1] - r.stream[1]
        out["late_amount"] += r.late[1]
        out["copies_count"] += r.copies[0]
        out["copies_amount"] += r.copies[1]
        out["explained_amount"] += r.late[1] - r.copies[1]
        out["unexplained_amount"] += r.residual[1]
    return dict(out)
