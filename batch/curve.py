"""The latency/completeness curve: what each lateness bound L would have cost and caught.

    lateness_curve(events_df, window_ms, lateness_ms, target) -> list[dict]   (one per L)
    recommend(curve, target) -> dict | None                                   (smallest L)

The events are replayed in ARRIVAL order (`arrival_seq`) under the textbook per-event rule,
with a single global watermark (no partitions, no idleness, no clock-skew clipping, no
micro-batches: it measures the *data*, not the job):

* the watermark at an event's arrival is `M − L`, where `M` is the largest event time seen so
  far, this event included;
* the event is dropped iff its window's end `E ≤ M − L` (so an event that raises `M` is never
  dropped, whatever L);
* a window (an event-time window `[start, end)`, all keys together: the watermark is global)
  exists if at least one of its events is admitted; it is emitted at the first arrival whose
  watermark reaches its end (`M − L ≥ E`), and its emit latency is `M − E` at that arrival
  (at least L: how much event time passed the window's end before it was final). Windows
  still open at the end of the input are not counted.

Per L: `events`, `admitted`, `dropped`, `dropped_amount`, `completeness_pct`
(= 100 · admitted / events; 100.0 with no events), `meets_target`, `windows_closed`,
`mean_emit_latency_ms`, `max_emit_latency_ms`.

How it runs (all Spark, nothing per event in Python), for n events, w windows, k values of L:

1. `M` per event: `max(event_time) over (order by arrival_seq rows unbounded preceding)`: one
   sort, then a running aggregate (a single-partition window: fine for millions of rows).
   With `slack = M − E`, the event is dropped under L iff `slack ≥ L`; completeness for every L
   is one aggregation pass (`count_if(slack ≥ L)` per L).
2. Emit latency: M only grows, so the first arrival with `M ≥ E + L` is the one where M takes
   the value `min{r ∈ R : r ≥ E + L}`, R = the distinct values of M ("records"). A window
   exists under L iff the smallest slack among its events is `< L`. The thresholds
   `E + L` (w·k rows) and the records (≤ n rows) are unioned and sorted once by value,
   descending (records first on ties), and a running `min(record)` over that order gives each
   threshold its first record at or above it: O((n + w·k) log(n + w·k)), no join of events
   with windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from fractions import Fraction
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from batch.reconcile import ReconcileError, day_events
from tally import tables as T
from tally.arrivals import first_arrivals
from tally.events import parse_events, read_jsonl_lines
from tally.settings import format_duration
from tally.vocabulary import ARRIVAL_ORDER, LINE_ORDER
from tally.windows import with_window

# -- inputs -----------------------------------------------------------------------------------


def with_arrival_seq(events: DataFrame, order: Sequence[str]) -> DataFrame:
    """Number the events 1, 2, ... in arrival `order` (column `arrival_seq`)."""
    return events.withColumn(
        "arrival_seq", F.row_number().over(Window.orderBy(*order)).cast("long")
    )


def events_from_log(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    window_ms: int,
    report_timezone: str = "UTC",
    events_version: int | None = None,
) -> tuple[DataFrame, int]:
    """The date's events from the `events` log (pinned version; latest if None), as they
    arrived: every valid event once (the first arrival of each event_id, like the batch
    layer), whose window belongs to the date. Returns (events with arrival_seq, version)."""
    if not T.exists(spark, warehouse, T.EVENTS.name):
        raise ReconcileError(f"events: no Delta table at {T.table_path(warehouse, 'events')}")
    version = (
        T.latest_version(spark, warehouse, T.EVENTS.name)
        if events_version is None
        else events_version
    )
    log = T.read_table(spark, warehouse, T.EVENTS.name, version)
    events = day_events(log, business_date, window_ms, report_timezone)
    return with_arrival_seq(events, ARRIVAL_ORDER), version


def events_from_jsonl(spark: SparkSession, path: str) -> DataFrame:
    """Valid events of a JSONL file (or a directory of them) in line order, each event_id
    once (its first line), with `arrival_seq`; invalid lines are skipped."""
    valid = parse_events(read_jsonl_lines(spark, path)).valid
    first = first_arrivals(valid, LINE_ORDER)
    return with_arrival_seq(first, LINE_ORDER)


# -- the curve --------------------------------------------------------------------------------


def meets_target(admitted: int, events: int, target: float) -> bool:
    """100 · admitted / events ≥ target, exactly (target read as the decimal it prints as)."""
    if events == 0:
        return True
    return Fraction(100 * admitted, events) >= Fraction(repr(float(target)))


def lateness_curve(
    events_df: DataFrame, window_ms: int, lateness_ms: Sequence[int], target: float | None
) -> list[dict[str, Any]]:
    """One dict per distinct L (ascending); `events_df` needs event_time, amount, arrival_seq
    (unique; already deduplicated). Two Spark jobs, whatever the number of L values."""
    if window_ms <= 0:
        raise ValueError(f"window: must be positive, got {window_ms} ms")
    values = sorted(set(lateness_ms))
    if not values:
        raise ValueError("lateness: give at least one value")
    if values[0] < 0:
        raise ValueError(f"lateness: must not be negative, got {values[0]} ms")

    running = Window.orderBy("arrival_seq").rowsBetween(Window.unboundedPreceding, 0)
    per_event = (
        with_window(events_df.select("event_time", "amount", "arrival_seq"), window_ms)
        .select(
            "amount",
            F.unix_millis("window_end").alias("end_ms"),
            F.max(F.unix_millis("event_time")).over(running).alias("max_ms"),
        )
        .withColumn("slack", F.col("max_ms") - F.col("end_ms"))
        .persist()
    )
    try:
        stats = _drop_stats(per_event, values)
        latency = _emit_latency(per_event, values)
    finally:
        per_event.unpersist()

    total = int(stats["events"])
    curve = []
    for i, lateness in enumerate(values):
        dropped = int(stats[f"dropped_{i}"])
        admitted = total - dropped
        closed, latency_sum, latency_max = latency.get(lateness, (0, 0, None))
        curve.append(
            {
                "lateness_ms": lateness,
                "lateness": format_duration(lateness),
                "events": total,
                "admitted": admitted,
                "dropped": dropped,
                "dropped_amount": int(stats[f"dropped_amount_{i}"] or 0),
                "completeness_pct": 100.0 * admitted / total if total else 100.0,
                "meets_target": None if target is None else meets_target(admitted, total, target),
                "windows_closed": closed,
                "mean_emit_latency_ms": latency_sum / closed if closed else None,
                "max_emit_latency_ms": latency_max,
            }
        )
    return curve


def _drop_stats(per_event: DataFrame, values: list[int]) -> dict[str, Any]:
    dropped = [F.col("slack") >= F.lit(lateness) for lateness in values]
    row = per_event.agg(
        F.count(F.lit(1)).alias("events"),
        *[F.count_if(d).alias(f"dropped_{i}") for i, d in enumerate(dropped)],
        *[
            F.sum(F.when(d, F.col("amount"))).cast("long").alias(f"dropped_amount_{i}")
            for i, d in enumerate(dropped)
        ],
    ).first()
    assert row is not None
    return row.asDict()


def _emit_latency(per_event: DataFrame, values: list[int]) -> dict[int, tuple[int, int, int]]:
    """{L: (windows closed, sum of emit latencies, max emit latency)} (see module docstring)."""
    spark = per_event.sparkSession
    lateness = spark.range(1).select(
        F.explode(F.array(*[F.lit(v).cast("long") for v in values])).alias("lateness")
    )
    windows = per_event.groupBy("end_ms").agg(F.min("slack").alias("min_slack"))
    thresholds = (
        windows.crossJoin(lateness)
        .where(F.col("min_slack") < F.col("lateness"))  # some event admitted: the window exists
        .select(
            (F.col("end_ms") + F.col("lateness")).alias("value"),
            F.lit(1).alias("kind"),
            "lateness",
            "end_ms",
        )
    )
    records = (
        per_event.select(F.col("max_ms").alias("value"))
        .distinct()
        .select(
            "value",
            F.lit(0).alias("kind"),
            F.lit(None).cast("long").alias("lateness"),
            F.lit(None).cast("long").alias("end_ms"),
        )
    )
    # Descending value, records before thresholds on ties: the running min of the records
    # seen so far is the smallest record >= the current threshold.
    order = Window.orderBy(F.col("value").desc(), F.col("kind")).rowsBetween(
        Window.unboundedPreceding, 0
    )
    first_record = F.min(F.when(F.col("kind") == 0, F.col("value"))).over(order)
    closed = (
        records.unionByName(thresholds)
        .withColumn("first_record", first_record)
        .where((F.col("kind") == 1) & F.col("first_record").isNotNull())
        .select("lateness", (F.col("first_record") - F.col("end_ms")).alias("latency"))
    )
    rows = (
        closed.groupBy("lateness")
        .agg(
            F.count(F.lit(1)).alias("windows"),
            F.sum("latency").cast("long").alias("total"),
            F.max("latency").cast("long").alias("worst"),
        )
        .collect()
    )
    return {int(r["lateness"]): (int(r["windows"]), int(r["total"]), int(r["worst"])) for r in rows}


def recommend(curve: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """The entry with the smallest L whose completeness reaches `target` (percent), exactly;
    None if no L in the curve does. Completeness never falls as L grows."""
    for entry in sorted(curve, key=lambda e: e["lateness_ms"]):
        if meets_target(entry["admitted"], entry["events"], target):
            return entry
    return None


# -- command line -----------------------------------------------------------------------------


def curve_report(
    events: DataFrame,
    window_ms: int,
    lateness_ms: Sequence[int],
    target: float,
    source: dict[str, Any],
) -> dict[str, Any]:
    """The curve with its source and recommendation: what `tally lateness-curve --json`
    prints."""
    curve = lateness_curve(events, window_ms, lateness_ms, target)
    best = recommend(curve, target)
    return {
        "source": source,
        "window_ms": window_ms,
        "target_pct": target,
        "curve": curve,
        "recommended": (
            {"lateness_ms": best["lateness_ms"], "lateness": best["lateness"]} if best else None
        ),
    }


def format_curve(report: dict[str, Any]) -> str:
    """The text table `tally lateness-curve` prints without --json."""
    lines = [
        f"{'lateness':>9} {'completeness':>13} {'dropped':>9} {'dropped amount':>16} "
        f"{'windows':>8} {'mean emit latency':>18}"
    ]
    for e in report["curve"]:
        mean = e["mean_emit_latency_ms"]
        lines.append(
            f"{e['lateness']:>9} {e['completeness_pct']:>12.4f}% {e['dropped']:>9,} "
            f"{e['dropped_amount']:>16,} {e['windows_closed']:>8,} "
            f"{'-' if mean is None else f'{mean:,.1f} ms':>18}"
        )
    best = report["recommended"]
    target = report["target_pct"]
    events = report["curve"][0]["events"] if report["curve"] else 0
    lines.append(
        f"{events:,} events; target {target}%: "
        + (
            f"smallest lateness reaching it is {best['lateness']}"
            if best
            else "no lateness in the list reaches it"
        )
    )
    return "\n".join(lines)
