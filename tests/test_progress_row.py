"""The `stream_progress` row as one typed value (streaming/progress.py): `Progress.to_sql`
builds it as one SQL query of literals, every value and map arriving with its type, empty maps
and NULLs included; `Progress.from_row` reads it back as the same value."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, date, datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming.progress import Progress, read_columns
from tally import tables as T

MS = 1_795_705_583_900

PROGRESS = Progress(
    batch_id=7,
    app_id="it's \\ an id",
    processing_time_ms=MS,
    watermark_before_ms=None,
    watermark_after_ms=MS - 30_000,
    partition_high_water_ms={1: MS, 0: MS - 5},
    partition_last_seen_ms={0: MS},
    partition_idle={0: False, 1: True},
    input_lines=20_000,
    valid_events=19_900,
    on_time_events=19_000,
    allowed_late_events=10,
    late_events=5,
    duplicate_events=885,
    quarantined_lines=100,
    clock_skewed_events=3,
    windows_emitted=10_000,
    open_windows=12_000,
    watermark_lag_ms=None,
    partition_spread_ms=5,
    batch_duration_ms=1_500,
    drained=False,
    window_state_version=7,
    dedup_state_version=7,
    events_version=2**40,
    control_records=0,
    partition_source_watermark_ms={},
    partition_unheard_ms={},
    source_watermark_regressions={},
    source_watermark_regression_ms={},
    partition_lateness_ms={0: 30_000, 1: 30_000},
    partition_delay_weights={0: {3: 12, 130: 4}, 1: {}},
    partition_delays_measured={0: 16, 1: 0},
    new_events_by_date={date(2026, 11, 26): 19_000, date(2026, 11, 25): 15},
    new_amount_by_date={date(2026, 11, 26): -3, date(2026, 11, 25): 2**40},
    report_timezone="Asia/Kolkata",
)


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def test_a_field_per_column_in_the_table_order(spark: SparkSession) -> None:
    """A TIMESTAMP column (or a map of them) `c` is the field `c_ms`; every other column is the
    field of its own name."""
    times = {"timestamp", "map<int,timestamp>"}
    assert [f.name for f in fields(Progress)] == [
        f"{c.name}_ms" if c.dataType.simpleString() in times else c.name
        for c in T.STREAM_PROGRESS.schema().fields
    ]


def test_the_progress_row_has_every_value_with_its_type(spark: SparkSession) -> None:
    df = T.conform(spark.sql(PROGRESS.to_sql()), T.STREAM_PROGRESS)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        (f.name, f.dataType.simpleString()) for f in T.STREAM_PROGRESS.schema().fields
    ]
    [row] = df.collect()
    r = row.asDict()
    assert r["app_id"] == "it's \\ an id" and r["batch_id"] == 7
    assert r["events_version"] == 2**40 and r["watermark_lag_ms"] is None
    assert r["processing_time"] == _ts(MS) and r["watermark_before"] is None
    assert r["watermark_after"] == _ts(MS - 30_000)
    assert r["partition_high_water"] == {0: _ts(MS - 5), 1: _ts(MS)}
    assert r["partition_idle"] == {0: False, 1: True}
    assert r["partition_source_watermark"] == {} and r["source_watermark_regressions"] == {}
    assert r["partition_delay_weights"] == {0: {3: 12, 130: 4}, 1: {}}
    assert r["partition_delays_measured"] == {0: 16, 1: 0}
    assert r["drained"] is False and r["duplicate_events"] == 885
    assert r["new_events_by_date"] == {date(2026, 11, 25): 15, date(2026, 11, 26): 19_000}
    assert r["new_amount_by_date"] == {date(2026, 11, 25): 2**40, date(2026, 11, 26): -3}


def test_a_drained_row_without_partitions(spark: SparkSession) -> None:
    p = replace(
        PROGRESS,
        watermark_after_ms=None,
        drained=True,
        partition_delay_weights={},
        partition_delays_measured={},
        partition_high_water_ms={},
        partition_last_seen_ms={},
        partition_idle={},
        partition_lateness_ms={},
        new_events_by_date={},
        new_amount_by_date={},
        report_timezone=None,
    )
    [row] = T.conform(spark.sql(p.to_sql()), T.STREAM_PROGRESS).collect()
    assert row["drained"] is True and row["watermark_after"] is None
    assert row["partition_high_water"] == {} and row["partition_delay_weights"] == {}


def test_read_back_as_the_value_written(spark: SparkSession) -> None:
    """Times as epoch ms again, maps as dicts with int keys: the value the next batch uses."""
    drained = replace(PROGRESS, watermark_after_ms=None, drained=True, partition_idle={})
    for p in (PROGRESS, drained):
        row = T.conform(spark.sql(p.to_sql()), T.STREAM_PROGRESS).selectExpr(*read_columns())
        assert Progress.from_row(row.collect()[0]) == p


def test_maps_an_older_row_lacks_read_as_empty(spark: SparkSession) -> None:
    """A row written before source watermarks and lateness auto: those columns are null."""
    older = {
        "partition_source_watermark": "map<int,timestamp>",
        "partition_unheard": "map<int,timestamp>",
        "partition_delay_weights": "map<int,map<int,bigint>>",
        "partition_delays_measured": "map<int,bigint>",
        "control_records": "bigint",
        "new_events_by_date": "map<date,bigint>",
        "new_amount_by_date": "map<date,bigint>",
        "report_timezone": "string",
    }
    [row] = (
        T.conform(spark.sql(PROGRESS.to_sql()), T.STREAM_PROGRESS)
        .withColumns({c: F.lit(None).cast(t) for c, t in older.items()})
        .selectExpr(*read_columns())
        .collect()
    )
    assert Progress.from_row(row) == replace(
        PROGRESS,
        partition_source_watermark_ms={},
        partition_unheard_ms={},
        partition_delay_weights={},
        partition_delays_measured={},
        control_records=None,
        new_events_by_date={},
        new_amount_by_date={},
        report_timezone=None,
    )
