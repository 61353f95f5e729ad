"""Streaming health: is the speed layer keeping up? Pure checks over the newest
`stream_progress` rows (watermark lag vs its steady state, late-event rate, idle partitions,
growing partition spread), and the read of those rows. Sending alerts is not done here."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tally import tables as T
from tally.alert import Alert
from tally.settings import Settings, format_duration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class HealthParams:
    """Thresholds of the streaming health check (settings `health_*`, plain values here)."""

    lag_factor: float  # lag alert above factor x median lag of the recent batches
    min_lag_ms: int  # ... and above this floor
    history: int  # recent batches read (steady state, late rate)
    spread_batches: int  # k: spread rising in each of the last k batches
    idle_max_ms: int  # a partition silent longer than this
    lateness_ms: int  # the configured bound: a spread above it matters
    late_rate_warn: float
    late_rate_fail: float
    min_history: int = 3  # batches needed before the lag has a steady state

    @classmethod
    def from_settings(cls, settings: Settings) -> HealthParams:
        return cls(
            lag_factor=settings.health_lag_factor,
            min_lag_ms=settings.health_min_lag,
            history=settings.health_history,
            spread_batches=settings.health_spread_batches,
            idle_max_ms=settings.health_idle_max,
            lateness_ms=settings.lateness,
            late_rate_warn=settings.late_rate_warn,
            late_rate_fail=settings.late_rate_fail,
        )


def _pct(x: float) -> str:
    return f"{100 * x:.3f}%"


Rows = Sequence[Mapping[str, Any]]


def evaluate_health(rows: Rows, params: HealthParams) -> list[Alert]:
    """Alerts for the recent `stream_progress` rows of one query, oldest first (times as epoch
    ms: `processing_ms`, `watermark_lag_ms`, `partition_spread_ms`, `last_seen` {partition:
    ms}, counts `late_events`, `valid_events`). Pure: no Spark."""
    if not rows:
        return [Alert("stream has committed no micro-batch", "0 batches", ">= 1", "warning")]
    return [
        *lag_alerts(rows, params),
        *late_rate_alerts(rows, params),
        *idle_alerts(rows, params),
        *spread_alerts(rows, params),
    ]


def lag_alerts(rows: Rows, params: HealthParams) -> list[Alert]:
    """The newest watermark lag against its steady state (median of the batches before)."""
    latest = rows[-1]
    lag = latest.get("watermark_lag_ms")
    prior = [int(r["watermark_lag_ms"]) for r in rows[:-1] if r.get("watermark_lag_ms") is not None]
    if lag is None or len(prior) < params.min_history:
        return []
    steady = statistics.median(prior)
    limit = max(steady * params.lag_factor, params.min_lag_ms)
    if lag <= limit:
        return []
    return [
        Alert(
            "watermark lag above its steady state",
            f"{format_duration(int(lag))} (batch {latest.get('batch_id')})",
            f"{format_duration(int(limit))} = max({params.lag_factor:g} x median "
            f"{format_duration(int(steady))}, {format_duration(params.min_lag_ms)})",
            "error",
        )
    ]


def late_rate_alerts(rows: Rows, params: HealthParams) -> list[Alert]:
    """Late events over valid events of the recent batches: a warning, then an error."""
    valid = sum(int(r.get("valid_events") or 0) for r in rows)
    late = sum(int(r.get("late_events") or 0) for r in rows)
    if not valid:
        return []
    rate = late / valid
    if rate > params.late_rate_fail:
        severity, limit = "error", params.late_rate_fail
    elif rate > params.late_rate_warn:
        severity, limit = "warning", params.late_rate_warn
    else:
        return []
    observed = f"{_pct(rate)} ({late} of {valid} events, last {len(rows)} batches)"
    return [Alert("late-event rate above threshold", observed, _pct(limit), severity)]


def idle_alerts(rows: Rows, params: HealthParams) -> list[Alert]:
    """Partitions silent (processing time) longer than `idle_max_ms` at the newest batch."""
    latest = rows[-1]
    now_ms = latest.get("processing_ms")
    if now_ms is None:
        return []
    return [
        Alert(
            f"partition {part} idle too long",
            f"silent {format_duration(int(now_ms - seen))}",
            format_duration(params.idle_max_ms),
            "warning",
        )
        for part, seen in sorted((latest.get("last_seen") or {}).items())
        if seen is not None and now_ms - seen > params.idle_max_ms
    ]


def spread_alerts(rows: Rows, params: HealthParams) -> list[Alert]:
    """The partition spread rose in each of the last k batches and ended above the bound."""
    k = params.spread_batches
    spreads = [r.get("partition_spread_ms") for r in rows[-k:]]
    if k < 2 or len(spreads) != k or any(s is None for s in spreads):
        return []
    values = [int(s) for s in spreads if s is not None]
    rising = all(b > a for a, b in itertools.pairwise(values))
    if not rising or values[-1] <= params.lateness_ms:
        return []
    return [
        Alert(
            f"partition spread grew in each of the last {k} batches",
            " < ".join(format_duration(v) for v in values),
            f"monotone rise over {k} batches ending above the lateness bound "
            f"{format_duration(params.lateness_ms)}",
            "warning",
        )
    ]


def read_recent_progress(spark: SparkSession, warehouse: str, history: int) -> list[dict[str, Any]]:
    """The last `history` live (not drained) batches of the newest query, oldest first."""
    from pyspark.sql import functions as F

    if not T.exists(spark, warehouse, T.STREAM_PROGRESS.name):
        return []
    progress = T.read_table(spark, warehouse, T.STREAM_PROGRESS.name)
    newest = progress.orderBy(F.col("processing_time").desc(), F.col("batch_id").desc()).first()
    if newest is None:
        return []
    rows = (
        progress.where((F.col("app_id") == newest["app_id"]) & ~F.col("drained"))
        .orderBy(F.col("batch_id").desc())
        .limit(history)
        .select(
            "batch_id",
            F.unix_millis("processing_time").alias("processing_ms"),
            "watermark_lag_ms",
            "partition_spread_ms",
            F.transform_values("partition_last_seen", lambda _k, v: F.unix_millis(v)).alias(
                "last_seen"
            ),
            "late_events",
            "valid_events",
        )
        .collect()
    )
    return [r.asDict() for r in reversed(rows)]
