"""The `stream_progress` row as one typed value: what a micro-batch writes, and what the next
batch and the run's summary read back.

Each field is the table's column of the same name (tally/tables.py STREAM_PROGRESS, which
holds the SQL types), except that times are epoch milliseconds here: a TIMESTAMP column `c`,
or a map of them, is the field `c_ms`. A new column is a field here and a column in the DDL.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

from pyspark.sql import Row

from tally import tables
from tally.sql_text import sql_string


@dataclass(frozen=True)
class Progress:
    """One micro-batch's `stream_progress` row (fields in the table's column order)."""

    batch_id: int
    app_id: str
    processing_time_ms: int
    watermark_before_ms: int | None
    watermark_after_ms: int | None  # None: no watermark yet, or drained
    partition_high_water_ms: Mapping[int, int]
    partition_last_seen_ms: Mapping[int, int]
    partition_idle: Mapping[int, bool]
    input_lines: int
    valid_events: int
    on_time_events: int
    allowed_late_events: int
    late_events: int
    duplicate_events: int
    quarantined_lines: int
    clock_skewed_events: int
    windows_emitted: int
    open_windows: int
    watermark_lag_ms: int | None
    partition_spread_ms: int | None
    batch_duration_ms: int
    drained: bool
    # The state is a set of files named by batch id (streaming.state): both versions name the
    # batch whose files hold the state after this batch.
    window_state_version: int
    dedup_state_version: int
    events_version: int
    control_records: int | None  # null in rows from before source watermarks
    partition_source_watermark_ms: Mapping[int, int]
    partition_unheard_ms: Mapping[int, int]
    source_watermark_regressions: Mapping[int, int]
    source_watermark_regression_ms: Mapping[int, int]
    partition_lateness_ms: Mapping[int, int]
    partition_delay_weights: Mapping[int, Mapping[int, int]]
    partition_delays_measured: Mapping[int, int]
    # per business date (in `report_timezone`) whose windows can hold them: the batch's
    # non-duplicate events and their amount (restatements, tally.restatements.signal)
    new_events_by_date: Mapping[date, int]
    new_amount_by_date: Mapping[date, int]
    report_timezone: str | None  # null in rows from before the signal

    def to_sql(self) -> str:
        """`SELECT <literals> FROM range(0, 1, 1, 1)`: the row as one SQL query of literals,
        built in the JVM in one Py4J call (a Column per value and map entry took hundreds of
        round trips); one partition, so one task and one file."""
        select = ", ".join(
            f"{_literal(getattr(self, name), sql_type)} AS `{column}`"
            for name, column, sql_type in _columns()
        )
        return f"SELECT {select} FROM range(0, 1, 1, 1)"

    @classmethod
    def from_row(cls, row: Row) -> Progress:
        """The value of a row selected with `read_columns()`. Maps a row from an older version
        lacks (columns added since) read as empty."""
        return cls(**{name: _python(row[name], sql_type) for name, _column, sql_type in _columns()})


@functools.cache
def _columns() -> tuple[tuple[str, str, str], ...]:
    """(field, column, SQL type) of each `stream_progress` column, in the table's order."""
    out = []
    for column in tables.STREAM_PROGRESS.schema().fields:
        sql_type = column.dataType.simpleString()
        times = sql_type in ("timestamp", "map<int,timestamp>")
        out.append((f"{column.name}_ms" if times else column.name, column.name, sql_type))
    return tuple(out)


@functools.cache
def read_columns() -> tuple[str, ...]:
    """The `stream_progress` columns as `Progress.from_row` takes them (times as epoch ms):
    SQL text for one `selectExpr`."""
    return tuple(_read_column(name, column, sql_type) for name, column, sql_type in _columns())


def _read_column(name: str, column: str, sql_type: str) -> str:
    if sql_type == "timestamp":
        return f"unix_millis(`{column}`) AS `{name}`"
    if sql_type == "map<int,timestamp>":
        return f"transform_values(`{column}`, (k, v) -> unix_millis(v)) AS `{name}`"
    return f"`{column}`"


def _map_values(sql_type: str) -> str | None:
    """The value type of a `map<int,...>` or `map<date,...>` type; None for any other type."""
    for key in ("int", "date"):
        if sql_type.startswith(f"map<{key},"):
            return sql_type.removeprefix(f"map<{key},").removesuffix(">")
    return None


def _key_literal(key: Any) -> str:
    """A map key (an int, or a date) as a SQL literal."""
    if isinstance(key, date):
        return f"DATE'{key.isoformat()}'"
    return str(int(key))


def _literal(value: Any, sql_type: str) -> str:
    """A value as a Spark SQL literal of its column's type (a map's int keys sorted)."""
    values = _map_values(sql_type)
    if value is None:
        return f"CAST(NULL AS {sql_type})"
    if values is not None and isinstance(value, Mapping):
        if not value:
            return f"CAST(map() AS {sql_type})"
        pairs = ", ".join(
            f"{_key_literal(k)}, {_literal(v, values)}" for k, v in sorted(value.items())
        )
        return f"CAST(map({pairs}) AS {sql_type})"
    if sql_type == "boolean" and isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and not isinstance(value, bool):
        if sql_type == "timestamp":
            return f"timestamp_millis({value}L)"
        if sql_type == "bigint":
            return f"{value}L"
    if sql_type == "string" and isinstance(value, str):
        return sql_string(value)
    raise TypeError(f"progress value {value!r} has no SQL literal of type {sql_type}")


def _python(value: Any, sql_type: str) -> Any:
    """A value read back (maps as dicts; a missing map empty)."""
    values = _map_values(sql_type)
    if values is None:
        return value
    if sql_type.startswith("map<date,"):
        return {k: _python(v, values) for k, v in (value or {}).items()}
    return {int(k): _python(v, values) for k, v in (value or {}).items()}
