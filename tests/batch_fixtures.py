"""Tiny hand-built speed-layer tables (events, stream_aggregates, late_events) for batch tests.

Rows are dicts with only what a test cares about; everything else gets a sensible default.
Times are UTC epoch milliseconds (`ms("2026-11-20T10:00:00Z")`). DataFrames are built with
`frames.frame`, in the JVM: a write costs well under a second.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from typing import Any

from frames import frame, frame_rows
from pyspark.sql import SparkSession

from tally import tables as T
from tally.windows import window_start_ms

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_lines = itertools.count(1)


def ms(text: str) -> int:
    """ISO-8601 with a zone -> epoch milliseconds."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert value.tzinfo is not None, text
    return (value - _EPOCH) // timedelta(milliseconds=1)


def utc_date(epoch_ms: int) -> date:
    return (_EPOCH + timedelta(milliseconds=epoch_ms)).date()


def event(
    event_id: str,
    key: str,
    amount: int,
    event_time: int,
    *,
    ingest: int | None = None,
    status: str = "on_time",
    batch_id: int = 0,
    source_file: str = "input/arrival-000000.jsonl",
    source_line: int | None = None,
    source_mtime: int | None = None,
    partition: int = 0,
    currency: str | None = None,
) -> dict[str, Any]:
    """An `events` row. Arrival defaults: ingested 1 s after its event time, file mtime =
    ingest time, a fresh line number (so rows without explicit arrival data are ordered);
    no currency (a row from before currencies: the run's default_currency)."""
    ingest = event_time + 1000 if ingest is None else ingest
    return {
        "event_id": event_id,
        "key": key,
        "amount": amount,
        "event_time": event_time,
        "partition": partition,
        "arrival_status": status,
        "clock_skewed": False,
        "source_mtime": ingest if source_mtime is None else source_mtime,
        "source_file": source_file,
        "source_line": next(_lines) if source_line is None else source_line,
        "batch_id": batch_id,
        "ingest_time": ingest,
        "app_id": "test-app",
        "event_date": utc_date(event_time),
        "currency": currency,
    }


def late(row: dict[str, Any], window_ms: int, lateness_ms: int) -> dict[str, Any]:
    """The `late_events` row of an `events` row (which should carry status "late")."""
    start = window_start_ms(row["event_time"], window_ms)
    end = start + window_ms
    columns = {f.name for f in T.LATE_EVENTS.schema().fields}  # needs a session: not at import
    return {
        **{k: v for k, v in row.items() if k in columns},
        "window_start": start,
        "window_end": end,
        "watermark_at_arrival": end + lateness_ms,
        "lateness_ms": lateness_ms,
        "arrival_delay_ms": row["ingest_time"] - row["event_time"],
        "reason": "window_closed",
    }


def stream_row(
    window_start: int,
    window_ms: int,
    key: str,
    event_count: int,
    amount_sum: int,
    revision: int = 1,
    currency: str | None = None,
) -> dict[str, Any]:
    """A `stream_aggregates` row (window given by its start; no currency: the default)."""
    emit = window_start + window_ms + 1000 * revision
    return {
        "window_start": window_start,
        "window_end": window_start + window_ms,
        "key": key,
        "event_count": event_count,
        "amount_sum": amount_sum,
        "revision": revision,
        "emit_time": emit,
        "watermark_at_emit": emit,
        "batch_id": revision,
        "app_id": "test-app",
        "currency": currency,
    }


def ensure_inputs(spark: SparkSession, warehouse: str) -> None:
    T.ensure_tables(spark, warehouse, (T.EVENTS, T.STREAM_AGGREGATES, T.LATE_EVENTS))


def append(spark: SparkSession, warehouse: str, table: T.Table, rows: list[dict[str, Any]]) -> int:
    """Append rows (one Delta commit) and return the new table version."""
    T.ensure_table(spark, warehouse, table)
    frame(spark, table, rows).write.format("delta").mode("append").save(
        T.table_path(warehouse, table.name)
    )
    return T.latest_version(spark, warehouse, table.name)


def write_inputs(
    spark: SparkSession,
    warehouse: str,
    window_ms: int,
    events: list[dict[str, Any]],
    stream: list[dict[str, Any]],
    late_events: list[dict[str, Any]] | None = None,
) -> None:
    """The three speed-layer tables at once. `late_events` defaults to the `events` rows with
    status "late" (lateness 1 s); pass rows made with `late` for anything else."""
    ensure_inputs(spark, warehouse)
    if late_events is None:
        late_events = [late(e, window_ms, 1000) for e in events if e["arrival_status"] == "late"]
    for table, rows in (
        (T.EVENTS, events),
        (T.STREAM_AGGREGATES, stream),
        (T.LATE_EVENTS, late_events),
    ):
        if rows:
            append(spark, warehouse, table, rows)


def table_rows(spark: SparkSession, warehouse: str, name: str) -> list[tuple[Any, ...]]:
    """All rows of a table, sorted, as hashable tuples (arrays become tuples, maps tuples of
    their sorted items)."""
    return frame_rows(T.read_table(spark, warehouse, name))
