"""The one definition of windows and window aggregates, shared by the speed and batch layers.

Tumbling event-time windows `[k*W, (k+1)*W)` aligned to the Unix epoch, in milliseconds.
The pure functions state the arithmetic; the Column functions are the same arithmetic in
the JVM. Both layers aggregate with `aggregate_windows`, so a gap between them can only
come from lateness, never from two implementations drifting apart.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

WINDOW_KEY = ("window_start", "window_end", "key")


def window_start_ms(event_time_ms: int, window_ms: int) -> int:
    """Start of the window holding `event_time_ms` (floor division: correct before 1970 too)."""
    return event_time_ms - (event_time_ms % window_ms)


def window_range_ms(event_time_ms: int, window_ms: int) -> tuple[int, int]:
    start = window_start_ms(event_time_ms, window_ms)
    return start, start + window_ms


def window_start_col(event_time: Column, window_ms: int) -> Column:
    ms = F.unix_millis(event_time)
    # pmod keeps pre-epoch times in the window below them, like Python's floor modulo.
    return F.timestamp_millis(ms - F.pmod(ms, F.lit(window_ms)))


def with_window(df: DataFrame, window_ms: int, time_col: str = "event_time") -> DataFrame:
    """Add `window_start`/`window_end` (timestamps) for the window holding `time_col`."""
    start = window_start_col(F.col(time_col), window_ms)
    return df.withColumn("window_start", start).withColumn(
        "window_end", F.timestamp_millis(F.unix_millis(start) + F.lit(window_ms))
    )


def aggregate_windows(df: DataFrame) -> DataFrame:
    """Count and exact integer sum of `amount` per (window_start, window_end, key)."""
    return df.groupBy(*WINDOW_KEY).agg(
        F.count(F.lit(1)).alias("event_count"),
        F.sum("amount").cast("long").alias("amount_sum"),
    )
