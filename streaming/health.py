"""Streaming health: is the speed layer keeping up? Pure checks over the newest
`stream_progress` rows (watermark lag vs its steady state, late-event rate, idle partitions,
expected partitions still unheard, growing partition spread, sources whose watermark keeps
regressing, a clock behind the events), and the read of those rows. Sending alerts is not done
here."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tally import tables
from tally.alert import Alert
from tally.durations import format_duration
from tally.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class HealthParams:
    """Thresholds of the streaming health check (settings `health_*`, plain values here)."""

    lag_factor: float  # lag alert above factor x median lag of the recent batches
    min_lag_ms: int  # ... and above this floor
    history: int  # recent batches read (steady state, late rate)
    spread_batches: int  # k: spread rising in each of the last k batches
    idle_max_ms: int  # a partition silent (or an expected one unheard) longer than this
    lateness_ms: int  # the configured bound: a spread above it matters
    late_rate_warn: float
    late_rate_fail: float
    min_history: int = 3  # batches needed before the lag has a steady state
    regression_min: int = 3  # a source watermark regressed in at least this many ...
    regression_batches: int = 10  # ... of the last this many batches
    max_clock_skew_ms: int = 300_000  # events further ahead of processing time are skewed

    @property
    def rows_needed(self) -> int:
        """How many recent batches the checks read."""
        return max(self.history, self.regression_batches)

    @classmethod
    def from_settings(cls, settings: Settings) -> HealthParams:
        return cls(
            lag_factor=settings.health_lag_factor,
            min_lag_ms=settings.health_min_lag,
            history=settings.health_history,
            spread_batches=settings.health_spread_batches,
            idle_max_ms=settings.health_idle_max,
            lateness_ms=settings.fixed_lateness,
            late_rate_warn=settings.late_rate_warn,
            late_rate_fail=settings.late_rate_fail,
            regression_min=settings.health_regression_min,
            regression_batches=settings.health_regression_batches,
            max_clock_skew_ms=settings.max_clock_skew,
        )


def _pct(x: float) -> str:
    return f"{100 * x:.3f}%"


Rows = Sequence[Mapping[str, Any]]


def evaluate_health(rows: Rows, params: HealthParams) -> list[Alert]:
    """Alerts for the recent `stream_progress` rows of one query, oldest first (times as epoch
    ms: `processing_ms`, `watermark_lag_ms`, `partition_spread_ms`, `last_seen` and
    `unheard` {partition: ms}, `regressions` {partition: count}, counts `late_events`,
    `valid_events`). Pure: no Spark."""
    if not rows:
        return [Alert("stream has committed no micro-batch", "0 batches", ">= 1", "warning")]
    return [
        *lag_alerts(rows, params),
        *late_rate_alerts(rows, params),
        *idle_alerts(rows, params),
        *unheard_alerts(rows, params),
        *spread_alerts(rows, params),
        *regression_alerts(rows, params),
        *clock_skew_alerts(rows, params),
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
    """Late events over valid events of the recent `history` batches: a warning, then an
    error."""
    rows = rows[-params.history :] if params.history else rows
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
    return _quiet_too_long(rows, params, "last_seen", "partition {} idle too long", "silent {}")


def unheard_alerts(rows: Rows, params: HealthParams) -> list[Alert]:
    """Expected partitions that have reported nothing for longer than `idle_max_ms` since they
    were first expected (the watermark waits for them until the idle timeout)."""
    return _quiet_too_long(
        rows,
        params,
        "unheard",
        "expected partition {} not heard from",
        "nothing for {} since it was expected",
    )


def _quiet_too_long(
    rows: Rows, params: HealthParams, column: str, what: str, observed: str
) -> list[Alert]:
    """A warning per partition of the newest batch's `column` ({partition: since ms}) quiet
    for longer than `idle_max_ms`."""
    latest = rows[-1]
    now_ms = latest.get("processing_ms")
    if now_ms is None:
        return []
    return [
        Alert(
            what.format(part),
            observed.format(format_duration(int(now_ms - since))),
            format_duration(params.idle_max_ms),
            "warning",
        )
        for part, since in sorted((latest.get(column) or {}).items())
        if since is not None and now_ms - since > params.idle_max_ms
    ]


def regression_alerts(rows: Rows, params: HealthParams) -> list[Alert]:
    """Partitions whose source watermark went back (a control record below the one before)
    in at least `regression_min` of the last `regression_batches` batches."""
    if params.regression_min < 1:  # 0: the check is off
        return []
    recent = rows[-params.regression_batches :]
    regressed: dict[int, int] = {}
    for row in recent:
        for part, count in (row.get("regressions") or {}).items():
            if count:
                regressed[part] = regressed.get(part, 0) + 1
    return [
        Alert(
            f"partition {part}'s source watermark keeps going back",
            f"regressed in {batches} of the last {len(recent)} batches",
            f"fewer than {params.regression_min} of {params.regression_batches}",
            "warning",
        )
        for part, batches in sorted(regressed.items())
        if batches >= params.regression_min
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


# -- a clock behind the events -------------------------------------------------------------------
# The watermark never passes processing time + max_clock_skew (streaming/watermark.py), so
# while most events are further ahead than that, no window closes and the open windows pile
# up batch after batch. The usual cause: files whose modification times were reset (restored,
# copied) streamed with `--clock arrival`.


def mostly_skewed(valid: int, skewed: int) -> bool:
    """More than half of the valid events are clock-skewed (docs/semantics.md)."""
    return valid > 0 and 2 * skewed > valid


def clock_skew_fix(arrival_clock: bool) -> str:
    """What to change, by the clock in force."""
    if arrival_clock:
        return (
            "the arrival clock (the input files' modification times; Kafka: record timestamps) "
            "is behind the events: stream with --clock wall, or restore the files' times"
        )
    return "the producers' clocks run ahead of this one: fix them, or raise max_clock_skew"


def clock_skew_warning(
    batch_id: int,
    valid: int,
    skewed: int,
    ahead_ms: int,
    max_clock_skew_ms: int,
    arrival_clock: bool,
) -> str | None:
    """The stream's one line for a batch whose events are mostly clock-skewed (None when they
    are not): how many, by how much, and what to change."""
    if not mostly_skewed(valid, skewed):
        return None
    return (
        f"clock skew: batch {batch_id}: {skewed:,} of {valid:,} events are more than "
        f"{format_duration(max_clock_skew_ms)} ahead of processing time (up to "
        f"{rounded_duration(ahead_ms)}), so no window closes and open windows pile up; "
        f"{clock_skew_fix(arrival_clock)}"
    )


def rounded_duration(ms: int) -> str:
    """A duration as a person reads it ("4 weeks", "6 hours"): Babel's CLDR wording."""
    from datetime import timedelta

    from babel.dates import format_timedelta

    return str(format_timedelta(timedelta(milliseconds=ms), locale="en_US", threshold=1.5))


def skewed_counts(rows: Rows) -> tuple[int, int]:
    """Valid and clock-skewed events over `stream_progress` rows."""
    valid = sum(int(r.get("valid_events") or 0) for r in rows)
    skewed = sum(int(r.get("clock_skewed_events") or 0) for r in rows)
    return valid, skewed


def clock_skew_alerts(rows: Rows, params: HealthParams) -> list[Alert]:
    """Most events of the recent `history` batches were clock-skewed."""
    rows = rows[-params.history :] if params.history else rows
    valid, skewed = skewed_counts(rows)
    if not mostly_skewed(valid, skewed):
        return []
    return [
        Alert(
            "most events are ahead of the stream's clock: no window closes",
            f"{skewed} of {valid} events more than {format_duration(params.max_clock_skew_ms)} "
            f"ahead of processing time (last {len(rows)} batches)",
            f"at most half ({clock_skew_fix(arrival_clock=True)}; with --clock wall: "
            f"{clock_skew_fix(arrival_clock=False)})",
            "error",
        )
    ]


def read_recent_progress(spark: SparkSession, warehouse: str, history: int) -> list[dict[str, Any]]:
    """The last `history` live (not drained) batches of the newest query, oldest first
    (`unheard` and `regressions` are empty in rows from before those columns)."""
    from pyspark.sql import functions as F

    if not tables.exists(spark, warehouse, tables.STREAM_PROGRESS.name):
        return []
    progress = tables.read_table(spark, warehouse, tables.STREAM_PROGRESS.name)
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
            # columns a table from before them lacks until its stream restarts: read as null
            _if_present(
                progress,
                "partition_unheard",
                lambda c: F.transform_values(c, lambda _k, v: F.unix_millis(v)),
            ).alias("unheard"),
            _if_present(progress, "source_watermark_regressions", lambda c: c).alias("regressions"),
            "late_events",
            "valid_events",
            "clock_skewed_events",
        )
        .collect()
    )
    return [r.asDict() for r in reversed(rows)]


def _if_present(frame: DataFrame, name: str, read: Callable[[Column], Column]) -> Column:
    from pyspark.sql import functions as F

    return read(F.col(name)) if name in frame.columns else F.lit(None)
