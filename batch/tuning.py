"""Lateness tuning: the lateness curve over a period of business dates, the smallest bound that
reaches the completeness target, and how the configured bound does; the same per source
partition (each partition's events replayed alone, see batch/curve.py), compared with the
configured per-partition bounds (`lateness_by_partition`; `lateness` where none is given). The
result is recorded in `lateness_recommendations` (one row per period, replaced on re-run) and
returned; deciding whether to alert is the caller's."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch.bounds import bounds_per_partition
from batch.curve import (
    day_events_with_partition,
    lateness_curve,
    lateness_curve_by_partition,
    recommend_by_partition,
    with_arrival_seq,
)
from tally import tables
from tally.completeness import recommend
from tally.dates import business_day_bounds, carried_day, epoch_ms
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
    # {partition: bound}; a partition not listed runs with configured_lateness_ms.
    configured_by_partition: Mapping[int, int] = field(default_factory=dict)

    def bound_of(self, partition: int) -> int:
        """The configured bound of a source partition."""
        return self.configured_by_partition.get(partition, self.configured_lateness_ms)


def period_events(
    spark: SparkSession, p: TuningParams, first_day: date, last_day: date
) -> tuple[DataFrame, int]:
    """The period's events (each business date deduplicated like the batch layer, with its
    source partition), from the latest `events` version; (events, that version)."""
    if not tables.exists(spark, p.warehouse, tables.EVENTS.name):
        raise ValueError(
            f"events: no Delta table at {tables.table_path(p.warehouse, tables.EVENTS.name)} "
            "(run the speed layer first)"
        )
    version = tables.latest_version(spark, p.warehouse, tables.EVENTS.name)
    log_df = tables.read_table(spark, p.warehouse, tables.EVENTS.name, version)
    days = [first_day + timedelta(days=i) for i in range((last_day - first_day).days + 1)]
    frames = [day_events_with_partition(log_df, d, p.window_ms, p.report_timezone) for d in days]
    return reduce(DataFrame.unionByName, frames), version


def tune_lateness(
    spark: SparkSession, p: TuningParams, first_day: date, last_day: date, *, now: datetime
) -> dict[str, Any]:
    """The curves over the events of `first_day`..`last_day` (business dates, inclusive),
    recorded in `lateness_recommendations`; returns the recorded values (the curves are in
    the table)."""
    if last_day < first_day:
        raise ValueError(f"period: {last_day} is before {first_day}")
    if now.tzinfo is None:
        raise ValueError("now: needs a time zone")
    events, version = period_events(spark, p, first_day, last_day)
    in_force = bounds_in_force_of_period(spark, p, first_day, last_day)
    ordered = with_arrival_seq(events, ARRIVAL_ORDER).persist()
    try:
        result, curve = _global_tuning(ordered, p)
        by_partition, partition_curve = _partition_tuning(ordered, p, in_force)
    finally:
        ordered.unpersist()
    result = {
        "period_start": first_day.isoformat(),
        "period_end": last_day.isoformat(),
        "events_version": version,
        **result,
        **by_partition,
        **compare_in_force(in_force, by_partition["recommended_by_partition"], partition_curve),
    }
    _record(spark, p, result, curve, partition_curve, now)
    return result


def bounds_in_force_of_period(
    spark: SparkSession, p: TuningParams, first_day: date, last_day: date
) -> dict[int, dict[str, int]]:
    """Per partition, the lateness bounds the stream had in force (`stream_progress`, fixed or
    chosen by lateness auto) over the micro-batches that carried the period's dates:
    {partition: {min_ms, max_ms, last_ms, batches}}; {} without stream_progress."""
    if not tables.exists(spark, p.warehouse, tables.STREAM_PROGRESS.name):
        return {}
    progress = tables.read_table(spark, p.warehouse, tables.STREAM_PROGRESS.name)
    if "partition_lateness_ms" not in progress.columns:
        return {}
    start = business_day_bounds(first_day, p.report_timezone)[0]
    end = business_day_bounds(last_day, p.report_timezone)[1]
    rows = bounds_per_partition(progress.where(carried_day((start, end)))).collect()
    return {
        int(r["partition"]): {k: int(r[k]) for k in ("min_ms", "max_ms", "last_ms", "batches")}
        for r in rows
    }


def compare_in_force(
    in_force: Mapping[int, Mapping[str, int]],
    recommended: Mapping[int, int | None],
    partition_curve: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The curve against the bounds in force (what lateness auto chose): per partition the
    smallest, largest and last bound in force, the curve's completeness at the last one, and
    the partitions whose recommended bound is wider than any bound in force (or for which no
    bound in the curve reaches the target): there the stream's bounds fell short of the
    period's delays."""
    at = {(e["partition"], e["lateness_ms"]): e["completeness_pct"] for e in partition_curve}
    short = []
    for part, b in sorted(in_force.items()):
        best = recommended.get(part, b["max_ms"])  # no events of it: nothing to compare
        if best is None or best > b["max_ms"]:
            short.append(part)
    return {
        "in_force_min_by_partition": {k: b["min_ms"] for k, b in sorted(in_force.items())},
        "in_force_max_by_partition": {k: b["max_ms"] for k, b in sorted(in_force.items())},
        "in_force_last_by_partition": {k: b["last_ms"] for k, b in sorted(in_force.items())},
        "in_force_completeness_by_partition": {
            k: at[(k, b["last_ms"])] for k, b in sorted(in_force.items()) if (k, b["last_ms"]) in at
        },
        "partitions_short_of_curve": short,
    }


def _global_tuning(
    events: DataFrame, p: TuningParams
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The global curve (candidates and the configured bound) and what it says."""
    values = sorted(set(p.candidates_ms) | {p.configured_lateness_ms})
    curve = lateness_curve(events, p.window_ms, values, p.target_pct)
    best = recommend(curve, p.target_pct)
    configured = next(e for e in curve if e["lateness_ms"] == p.configured_lateness_ms)
    result = {
        "events": int(configured["events"]),
        "target_pct": p.target_pct,
        "configured_lateness_ms": p.configured_lateness_ms,
        "configured_completeness_pct": configured["completeness_pct"],
        "configured_meets_target": bool(configured["meets_target"]),
        "recommended_lateness_ms": best["lateness_ms"] if best else None,
        "recommended_completeness_pct": best["completeness_pct"] if best else None,
    }
    return result, curve


def _partition_tuning(
    events: DataFrame, p: TuningParams, in_force: Mapping[int, Mapping[str, int]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The per-partition curve (candidates, every configured bound and the last bounds in
    force) and, for each partition with events: the smallest bound reaching the target (None:
    none does), its configured bound, and the partitions whose configured bound misses it."""
    values = sorted(
        set(p.candidates_ms)
        | {p.configured_lateness_ms}
        | set(p.configured_by_partition.values())
        | {b["last_ms"] for b in in_force.values()}
    )
    curve = lateness_curve_by_partition(events, p.window_ms, values, p.target_pct)
    best = recommend_by_partition(curve, p.target_pct)
    at_bound = [e for e in curve if e["lateness_ms"] == p.bound_of(e["partition"])]
    result = {
        "recommended_by_partition": {
            part: (e["lateness_ms"] if e else None) for part, e in best.items()
        },
        "configured_by_partition": {e["partition"]: e["lateness_ms"] for e in at_bound},
        "configured_completeness_by_partition": {
            e["partition"]: e["completeness_pct"] for e in at_bound
        },
        "partitions_missing_target": [e["partition"] for e in at_bound if not e["meets_target"]],
    }
    return result, curve


def _record(
    spark: SparkSession,
    p: TuningParams,
    result: dict[str, Any],
    curve: list[dict[str, Any]],
    partition_curve: list[dict[str, Any]],
    now: datetime,
) -> None:
    first_day = date.fromisoformat(result["period_start"])
    row = tables.literal_row(
        spark,
        {
            "period_start": F.lit(first_day),
            "period_end": F.lit(date.fromisoformat(result["period_end"])),
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
            "recommended_by_partition": tables.literal_map(
                result["recommended_by_partition"], "int", "bigint"
            ),
            "configured_by_partition": tables.literal_map(
                result["configured_by_partition"], "int", "bigint"
            ),
            "configured_completeness_by_partition": tables.literal_map(
                result["configured_completeness_by_partition"], "int", "double"
            ),
            "partitions_missing_target": F.array(
                *[F.lit(part) for part in result["partitions_missing_target"]]
            ).cast("array<int>"),
            "curve_by_partition": F.lit(json.dumps(partition_curve, sort_keys=True, default=str)),
            **{
                f"{name}_by_partition": tables.literal_map(
                    result[f"{name}_by_partition"], "int", "bigint"
                )
                for name in ("in_force_min", "in_force_max", "in_force_last")
            },
            "in_force_completeness_by_partition": tables.literal_map(
                result["in_force_completeness_by_partition"], "int", "double"
            ),
            "partitions_short_of_curve": F.array(
                *[F.lit(part) for part in result["partitions_short_of_curve"]]
            ).cast("array<int>"),
        },
    )
    table = tables.LATENESS_RECOMMENDATIONS
    tables.ensure_table(spark, p.warehouse, table)
    tables.add_missing_columns(spark, p.warehouse, table)
    tables.write_table(
        row, p.warehouse, table, replace_where=f"period_start = DATE'{first_day.isoformat()}'"
    )
