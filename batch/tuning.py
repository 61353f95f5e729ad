"""Lateness tuning: the lateness curve over a period of business dates, the smallest bound that
reaches the completeness target, and how the configured bound does. The result is recorded in
`lateness_recommendations` (one row per period, replaced on re-run) and returned; deciding
whether to alert is the caller's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch.curve import lateness_curve, recommend, with_arrival_seq
from batch.reconcile import day_events
from tally import tables as T
from tally.dates import epoch_ms
from tally.vocabulary import ARRIVAL_ORDER


@dataclass(frozen=True)
class TuningParams:
    """Plain values of a tuning run (read from Settings by the caller)."""

    warehouse: str
    window_ms: int
    configured_lateness_ms: int
    candidates_ms: Sequence[int]
    target_pct: float
    report_timezone: str = "UTC"


def period_events(
    spark: SparkSession, p: TuningParams, first_day: date, last_day: date
) -> tuple[DataFrame, int]:
    """The period's events (each business date deduplicated like the batch layer), from the
    latest `events` version; (events, that version)."""
    if not T.exists(spark, p.warehouse, T.EVENTS.name):
        raise ValueError(
            f"events: no Delta table at {T.table_path(p.warehouse, T.EVENTS.name)} "
            "(run the speed layer first)"
        )
    version = T.latest_version(spark, p.warehouse, T.EVENTS.name)
    log_df = T.read_table(spark, p.warehouse, T.EVENTS.name, version)
    days = [first_day + timedelta(days=i) for i in range((last_day - first_day).days + 1)]
    frames = [day_events(log_df, d, p.window_ms, p.report_timezone) for d in days]
    return reduce(DataFrame.unionByName, frames), version


def tune_lateness(
    spark: SparkSession, p: TuningParams, first_day: date, last_day: date, *, now: datetime
) -> dict[str, Any]:
    """The curve over the events of `first_day`..`last_day` (business dates, inclusive),
    recorded in `lateness_recommendations`; returns the recorded values (the curve is in the
    table)."""
    if last_day < first_day:
        raise ValueError(f"period: {last_day} is before {first_day}")
    if now.tzinfo is None:
        raise ValueError("now: needs a time zone")
    values = sorted(set(p.candidates_ms) | {p.configured_lateness_ms})
    events, version = period_events(spark, p, first_day, last_day)
    curve = lateness_curve(
        with_arrival_seq(events, ARRIVAL_ORDER), p.window_ms, values, p.target_pct
    )
    best = recommend(curve, p.target_pct)
    configured = next(e for e in curve if e["lateness_ms"] == p.configured_lateness_ms)
    result = {
        "period_start": first_day.isoformat(),
        "period_end": last_day.isoformat(),
        "events": int(configured["events"]),
        "events_version": version,
        "target_pct": p.target_pct,
        "configured_lateness_ms": p.configured_lateness_ms,
        "configured_completeness_pct": configured["completeness_pct"],
        "configured_meets_target": bool(configured["meets_target"]),
        "recommended_lateness_ms": best["lateness_ms"] if best else None,
        "recommended_completeness_pct": best["completeness_pct"] if best else None,
    }
    _record(spark, p, result, curve, first_day, last_day, now)
    return result


def _record(
    spark: SparkSession,
    p: TuningParams,
    result: dict[str, Any],
    curve: list[dict[str, Any]],
    first_day: date,
    last_day: date,
    now: datetime,
) -> None:
    row = T.literal_row(
        spark,
        {
            "period_start": F.lit(first_day),
            "period_end": F.lit(last_day),
            "run_time": F.timestamp_millis(F.lit(epoch_ms(now))),
            "window_ms": F.lit(p.window_ms),
            "events": F.lit(result["events"]),
            "events_version": F.lit(result["events_version"]),
            "target_pct": F.lit(float(p.target_pct)),
            "configured_lateness_ms": F.lit(p.configured_lateness_ms),
            "configured_completeness_pct": F.lit(float(result["configured_completeness_pct"])),
            "configured_meets_target": F.lit(result["configured_meets_target"]),
            "recommended_lateness_ms": F.lit(result["recommended_lateness_ms"]),
            "recommended_completeness_pct": F.lit(result["recommended_completeness_pct"]),
            "curve": F.lit(json.dumps(curve, sort_keys=True, default=str)),
        },
    )
    table = T.LATENESS_RECOMMENDATIONS
    T.ensure_table(spark, p.warehouse, table)
    T.write_table(
        row, p.warehouse, table, replace_where=f"period_start = DATE'{first_day.isoformat()}'"
    )
