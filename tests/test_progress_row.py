"""The `stream_progress` row built as one SQL query of literals (streaming/job.py,
`_progress_sql`): every value and map arrives with its type, empty maps and NULLs included."""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import SparkSession

from streaming.job import _progress_sql
from tally import tables as T

MS = 1_795_705_583_900


def _values(**over: object) -> dict[str, object]:
    p: dict[str, object] = {
        "batch_id": 7,
        "app_id": "it's \\ an id",
        "processing_ms": MS,
        "wm_before": None,
        "wm_after": MS - 30_000,
        "high_water": {1: MS, 0: MS - 5},
        "last_seen": {0: MS},
        "partition_idle": {0: False, 1: True},
        "input_lines": 20_000,
        "valid_events": 19_900,
        "on_time_events": 19_000,
        "allowed_late_events": 10,
        "late_events": 5,
        "duplicate_events": 885,
        "quarantined_lines": 100,
        "control_records": 0,
        "source_watermark": {},
        "unheard": {},
        "source_regressions": {},
        "source_regression_ms": {},
        "lateness": {0: 30_000, 1: 30_000},
        "delay_weights": {0: {3: 12, 130: 4}, 1: {}},
        "delays_measured": {0: 16, 1: 0},
        "clock_skewed_events": 3,
        "windows_emitted": 10_000,
        "open_windows": 12_000,
        "watermark_lag_ms": None,
        "partition_spread_ms": 5,
        "batch_duration_ms": 1_500,
        "drained": False,
        "window_state_version": 7,
        "dedup_state_version": 7,
        "events_version": 2**40,
    }
    p.update(over)
    return p


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def test_the_progress_row_has_every_value_with_its_type(spark: SparkSession) -> None:
    df = T.conform(spark.sql(_progress_sql(_values())), T.STREAM_PROGRESS)
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


def test_a_drained_row_without_partitions(spark: SparkSession) -> None:
    empty = {"high_water": {}, "last_seen": {}, "partition_idle": {}, "lateness": {}}
    p = _values(wm_after=None, drained=True, delay_weights={}, delays_measured={}, **empty)
    [row] = T.conform(spark.sql(_progress_sql(p)), T.STREAM_PROGRESS).collect()
    assert row["drained"] is True and row["watermark_after"] is None
    assert row["partition_high_water"] == {} and row["partition_delay_weights"] == {}
