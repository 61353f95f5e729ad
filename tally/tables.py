"""The Delta table catalog: names, schemas and locations under the warehouse.

The warehouse is any Hadoop-compatible URI (a local directory, `s3a://bucket/prefix`, ...):
locations are joined as strings, never with local path functions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType


@dataclass(frozen=True)
class Table:
    name: str
    ddl: str
    description: str
    partition_by: tuple[str, ...] = ()
    internal: bool = False

    def schema(self) -> StructType:
        schema = StructType.fromDDL(self.ddl)
        assert isinstance(schema, StructType)
        return schema


_SOURCE = (
    "source_file STRING, source_line BIGINT, batch_id BIGINT, ingest_time TIMESTAMP, app_id STRING"
)
_PAYLOAD = (
    "event_id STRING, key STRING, amount BIGINT, event_time TIMESTAMP, partition INT, "
    "extra MAP<STRING, STRING>"
)

EVENTS = Table(
    "events",
    f"{_PAYLOAD}, arrival_status STRING, clock_skewed BOOLEAN, source_mtime TIMESTAMP, "
    f"{_SOURCE}, event_date DATE",
    "Every valid event (on time, late or duplicate): the event-sourced log the nightly job "
    "re-aggregates. arrival_status is on_time, allowed_late, late or duplicate.",
    partition_by=("event_date",),
)
QUARANTINE = Table(
    "quarantine",
    f"raw_line STRING, reason STRING, {_SOURCE}",
    "Input lines that are not valid events, with the raw line and the reason.",
)
LATE_EVENTS = Table(
    "late_events",
    f"{_PAYLOAD}, window_start TIMESTAMP, window_end TIMESTAMP, watermark_at_arrival TIMESTAMP, "
    f"lateness_ms BIGINT, arrival_delay_ms BIGINT, reason STRING, {_SOURCE}",
    "The late side output: events whose window had closed (beyond allowed lateness) when "
    "they arrived, with the watermark at arrival and how late they were.",
)
STREAM_AGGREGATES = Table(
    "stream_aggregates",
    "window_start TIMESTAMP, window_end TIMESTAMP, key STRING, event_count BIGINT, "
    "amount_sum BIGINT, revision INT, emit_time TIMESTAMP, watermark_at_emit TIMESTAMP, "
    "batch_id BIGINT, app_id STRING",
    "Provisional window totals, emitted when the watermark passes the window end; "
    "allowed-lateness updates append a higher revision.",
)
STREAM_PROGRESS = Table(
    "stream_progress",
    "batch_id BIGINT, app_id STRING, processing_time TIMESTAMP, watermark_before TIMESTAMP, "
    "watermark_after TIMESTAMP, partition_high_water MAP<INT, TIMESTAMP>, "
    "partition_last_seen MAP<INT, TIMESTAMP>, partition_idle MAP<INT, BOOLEAN>, "
    "input_lines BIGINT, valid_events BIGINT, on_time_events BIGINT, allowed_late_events BIGINT, "
    "late_events BIGINT, duplicate_events BIGINT, quarantined_lines BIGINT, "
    "clock_skewed_events BIGINT, windows_emitted BIGINT, open_windows BIGINT, "
    "watermark_lag_ms BIGINT, partition_spread_ms BIGINT, batch_duration_ms BIGINT, "
    "drained BOOLEAN, window_state_version BIGINT, dedup_state_version BIGINT, "
    "events_version BIGINT",
    "One row per micro-batch: watermark before/after, per-partition high-water marks and "
    "idle flags, counts, lag, spread, duration, and the state versions it pinned.",
)
WINDOW_STATE = Table(
    "window_state",
    "window_start TIMESTAMP, window_end TIMESTAMP, key STRING, event_count BIGINT, "
    "amount_sum BIGINT, emitted_revision INT",
    "Internal: open windows (bounded by the watermark plus allowed lateness).",
    internal=True,
)
DEDUP_STATE = Table(
    "dedup_state",
    "event_id STRING, window_end TIMESTAMP",
    "Internal: ids seen in windows that can still change (bounded like window_state).",
    internal=True,
)
BATCH_CLOCK = Table(
    "batch_clock",
    "app_id STRING, batch_id BIGINT, processing_time TIMESTAMP",
    "Internal: the processing time each micro-batch first ran with, so a replay reuses it.",
    internal=True,
)

STREAMING_TABLES = (
    EVENTS,
    QUARANTINE,
    LATE_EVENTS,
    STREAM_AGGREGATES,
    STREAM_PROGRESS,
    WINDOW_STATE,
    DEDUP_STATE,
    BATCH_CLOCK,
)
CATALOG: dict[str, Table] = {t.name: t for t in STREAMING_TABLES}


def register(table: Table) -> Table:
    CATALOG[table.name] = table
    return table


def table_path(warehouse: str, name: str) -> str:
    """The table's location. A relative local warehouse is made absolute: Delta's table
    builder reads a bare relative path as a table name."""
    if "://" not in warehouse and not warehouse.startswith("file:"):
        warehouse = os.path.abspath(warehouse)
    return f"{warehouse.rstrip('/')}/{name}"


def ensure_table(spark: SparkSession, warehouse: str, table: Table) -> None:
    """Create the table empty if it does not exist yet (idempotent)."""
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(spark).location(table_path(warehouse, table.name))
    builder = builder.addColumns(table.schema())
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    builder.execute()


def ensure_tables(spark: SparkSession, warehouse: str, tables: tuple[Table, ...]) -> None:
    for table in tables:
        ensure_table(spark, warehouse, table)


def read_table(
    spark: SparkSession, warehouse: str, name: str, version: int | None = None
) -> DataFrame:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(table_path(warehouse, name))


def latest_version(spark: SparkSession, warehouse: str, name: str) -> int:
    from delta.tables import DeltaTable

    row = DeltaTable.forPath(spark, table_path(warehouse, name)).history(1).first()
    assert row is not None
    return int(row["version"])


def empty_frame(spark: SparkSession, table: Table) -> DataFrame:
    """An empty DataFrame of the table's schema, built in the JVM (no Python workers)."""
    return spark.range(0).select(
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in table.schema().fields]
    )


def literal_row(spark: SparkSession, values: dict[str, Column]) -> DataFrame:
    """One row of literal columns, built in the JVM: createDataFrame would start Python
    workers to deserialize the row, which costs seconds per micro-batch."""
    return spark.range(1).select(*[col.alias(name) for name, col in values.items()])


def literal_map(entries: dict[Any, Any], key_type: str, value_type: str) -> Column:
    if not entries:
        return F.create_map().cast(f"map<{key_type},{value_type}>")
    pairs = [F.lit(x) for item in sorted(entries.items()) for x in item]
    return F.create_map(*pairs).cast(f"map<{key_type},{value_type}>")
