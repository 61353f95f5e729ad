"""The nightly reconciliation as stages: what `tally reconcile` and the Airflow DAG both call.

Each stage takes Settings (read by the caller, the entry point), the business date and `now`
(passed in, never read here), builds its own Spark session and returns small plain values.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tally.settings import Settings


@dataclass(frozen=True)
class WaitResult:
    ready: bool
    detail: str


def business_day_end(business_date: date, timezone: str) -> datetime:
    """End of the business day (exclusive) as a UTC datetime."""
    local_end = datetime.combine(business_date + timedelta(days=1), time(0), ZoneInfo(timezone))
    return local_end.astimezone(UTC)


def _session(settings: Settings, app: str) -> Any:
    from tally.spark import build_session

    return build_session(
        settings.spark_master, app_name=app, shuffle_partitions=settings.shuffle_partitions
    )


def stream_watermark_ms(spark: Any, warehouse: str) -> int | None:
    """The newest watermark the stream has committed (None if it has not run)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from tally import tables as T

    path = T.table_path(warehouse, T.STREAM_PROGRESS.name)
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    row = (
        T.read_table(spark, warehouse, T.STREAM_PROGRESS.name)
        .select(F.max(F.unix_millis("watermark_after")).alias("wm"))
        .first()
    )
    return None if row is None or row["wm"] is None else int(row["wm"])


def wait_condition(settings: Settings, business_date: date, spark: Any = None) -> WaitResult:
    """Ready once the stream's watermark passed the end of the day plus allowed lateness:
    after that no on-time or allowed-late event of the day can still change a window."""
    spark = spark or _session(settings, "tally-wait")
    needed = business_day_end(business_date, settings.report_timezone) + timedelta(
        milliseconds=settings.allowed_lateness
    )
    watermark = stream_watermark_ms(spark, settings.warehouse)
    if watermark is None:
        return WaitResult(False, "stream has not committed any batch yet")
    needed_ms = int(needed.timestamp() * 1000)
    have = datetime.fromtimestamp(watermark // 1000, UTC).isoformat()
    if watermark >= needed_ms:
        return WaitResult(True, f"watermark {have} passed {needed.isoformat()}")
    return WaitResult(False, f"watermark {have} has not reached {needed.isoformat()}")
