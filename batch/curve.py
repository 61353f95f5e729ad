"""The latency/completeness curve: what each lateness bound L would have cost and caught.

    lateness_curve(events_df, window_ms, lateness_ms, target) -> list[dict]   (one per L)
    recommend(curve, target) -> dict | None             (smallest L; from tally.completeness)
    lateness_curve_by_partition(...) -> list[dict]          (one per source partition and L)
    recommend_by_partition(curve, target) -> {partition: dict | None}  (smallest L of each)

The events are replayed in ARRIVAL order (`arrival_seq`) under the textbook per-event rule,
with a single global watermark (no partitions, see the per-partition curve below; no
idleness, no clock-skew clipping, no micro-batches: it measures the *data*, not the job):

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

The per-partition curve (for `lateness_by_partition`, docs/lateness-tuning.md) replays each
source partition's events alone, in arrival order, under the same rule with `M_p`, the largest
event time seen so far ON THAT PARTITION (this event included): the event is dropped under L
iff `E ≤ M_p − L`. Phase 1 is the same running max, partitioned by `partition`, and one
grouped aggregation gives `events`, `admitted`, `dropped`, `dropped_amount`,
`completeness_pct` and `meets_target` per (partition, L). It has no emit latency: a window
holds every partition's events and is emitted when the combined watermark
`min_p(M_p − L_p)` passes it, so its latency depends on all the partitions' bounds at once,
not on one partition's L. Under the stream's `partition-min` rule the watermark never
exceeds `M_p − L_p` while p is known and not idle, so these drops are an upper bound of what
the stream drops on p with that bound (a partition that starts late or wakes from idleness
can meet a watermark the others set; the curve does not model that).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from batch.diff import day_events
from batch.reconcile import ReconcileError
from tally import tables
from tally.arrivals import first_arrivals
from tally.completeness import meets_target, recommend
from tally.durations import format_duration
from tally.events import parse_events, read_jsonl_lines
from tally.settings import format_partition_durations
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
    if not tables.exists(spark, warehouse, tables.EVENTS.name):
        raise ReconcileError(f"events: no Delta table at {tables.table_path(warehouse, 'events')}")
    version = (
        tables.latest_version(spark, warehouse, tables.EVENTS.name)
        if events_version is None
        else events_version
    )
    log = tables.read_table(spark, warehouse, tables.EVENTS.name, version)
    events = day_events_with_partition(log, business_date, window_ms, report_timezone)
    return with_arrival_seq(events, ARRIVAL_ORDER), version


def day_events_with_partition(
    log: DataFrame, business_date: date, window_ms: int, report_timezone: str = "UTC"
) -> DataFrame:
    """`day_events` of the log, each event with its source `partition`. day_events keeps
    the columns of its arrival order, so `partition` rides along as a last tie-breaker: the
    arrival columns already order the lines, and it never decides the first arrival."""
    return day_events(
        log, business_date, window_ms, report_timezone, order=(*ARRIVAL_ORDER, "partition")
    )


def events_from_jsonl(spark: SparkSession, path: str) -> DataFrame:
    """Valid events of a JSONL file (or a directory of them) in line order, each event_id
    once (its first line), with `arrival_seq`; invalid lines are skipped."""
    valid = parse_events(read_jsonl_lines(spark, path)).valid
    first = first_arrivals(valid, LINE_ORDER)
    return with_arrival_seq(first, LINE_ORDER)


# -- the curve --------------------------------------------------------------------------------


def lateness_curve(
    events_df: DataFrame, window_ms: int, lateness_ms: Sequence[int], target: float | None
) -> list[dict[str, Any]]:
    """One dict per distinct L (ascending); `events_df` needs event_time, amount, arrival_seq
    (unique; already deduplicated). Two Spark jobs, whatever the number of L values."""
    values = lateness_values(window_ms, lateness_ms)
    per_event = slack_per_event(events_df, window_ms).persist()
    try:
        (stats,) = _drop_stats(per_event, values)
        latency = _emit_latency(per_event, values)
    finally:
        per_event.unpersist()

    curve = []
    for i, lateness in enumerate(values):
        closed, latency_sum, latency_max = latency.get(lateness, (0, 0, None))
        curve.append(
            {
                **_drop_entry(stats, i, lateness, target),
                "windows_closed": closed,
                "mean_emit_latency_ms": latency_sum / closed if closed else None,
                "max_emit_latency_ms": latency_max,
            }
        )
    return curve


def lateness_curve_by_partition(
    events_df: DataFrame, window_ms: int, lateness_ms: Sequence[int], target: float | None
) -> list[dict[str, Any]]:
    """One dict per (source partition with events, distinct L), by partition then L; each
    partition replayed under its own running max (module docstring). `events_df` needs
    event_time, amount, arrival_seq and partition (INT, not null). One Spark job."""
    values = lateness_values(window_ms, lateness_ms)
    per_event = slack_per_event(events_df, window_ms, by=("partition",))
    stats = sorted(_drop_stats(per_event, values, by=("partition",)), key=lambda s: s["partition"])
    return [
        {"partition": int(s["partition"]), **_drop_entry(s, i, lateness, target)}
        for s in stats
        for i, lateness in enumerate(values)
    ]


def lateness_values(window_ms: int, lateness_ms: Sequence[int]) -> list[int]:
    """The distinct bounds, ascending; ValueError for a bad window or bound."""
    if window_ms <= 0:
        raise ValueError(f"window: must be positive, got {window_ms} ms")
    values = sorted(set(lateness_ms))
    if not values:
        raise ValueError("lateness: give at least one value")
    if values[0] < 0:
        raise ValueError(f"lateness: must not be negative, got {values[0]} ms")
    return values


def slack_per_event(events_df: DataFrame, window_ms: int, by: Sequence[str] = ()) -> DataFrame:
    """Phase 1, per event: `by`, amount, `end_ms` (its window's end), `max_ms` (the largest
    event time so far in arrival order within its `by` group, this event included) and
    `slack = max_ms − end_ms` (dropped under L iff slack ≥ L)."""
    running = (
        Window.partitionBy(*by).orderBy("arrival_seq").rowsBetween(Window.unboundedPreceding, 0)
    )
    return (
        with_window(events_df.select(*by, "event_time", "amount", "arrival_seq"), window_ms)
        .select(
            *by,
            "amount",
            F.unix_millis("window_end").alias("end_ms"),
            F.max(F.unix_millis("event_time")).over(running).alias("max_ms"),
        )
        .withColumn("slack", F.col("max_ms") - F.col("end_ms"))
    )


def _drop_stats(
    per_event: DataFrame, values: list[int], by: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Per `by` group (one row without `by`): events, and dropped_i / dropped_amount_i for
    the i-th bound of `values`."""
    dropped = [F.col("slack") >= F.lit(lateness) for lateness in values]
    rows = (
        per_event.groupBy(*by)
        .agg(
            F.count(F.lit(1)).alias("events"),
            *[F.count_if(d).alias(f"dropped_{i}") for i, d in enumerate(dropped)],
            *[
                F.sum(F.when(d, F.col("amount"))).cast("long").alias(f"dropped_amount_{i}")
                for i, d in enumerate(dropped)
            ],
        )
        .collect()
    )
    return [row.asDict() for row in rows]


def _drop_entry(
    stats: dict[str, Any], i: int, lateness: int, target: float | None
) -> dict[str, Any]:
    """The drop metrics of the i-th bound (`lateness`) from one `_drop_stats` row."""
    total = int(stats["events"])
    dropped = int(stats[f"dropped_{i}"])
    admitted = total - dropped
    return {
        "lateness_ms": lateness,
        "lateness": format_duration(lateness),
        "events": total,
        "admitted": admitted,
        "dropped": dropped,
        "dropped_amount": int(stats[f"dropped_amount_{i}"] or 0),
        "completeness_pct": 100.0 * admitted / total if total else 100.0,
        "meets_target": None if target is None else meets_target(admitted, total, target),
    }


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


def recommend_by_partition(
    curve: list[dict[str, Any]], target: float
) -> dict[int, dict[str, Any] | None]:
    """{partition: its entry with the smallest L reaching `target`, or None} for every
    partition of a `lateness_curve_by_partition` curve."""
    entries: dict[int, list[dict[str, Any]]] = {}
    for entry in curve:
        entries.setdefault(int(entry["partition"]), []).append(entry)
    return {p: recommend(entries[p], target) for p in sorted(entries)}


# -- command line -----------------------------------------------------------------------------


def curve_report(
    events: DataFrame,
    window_ms: int,
    lateness_ms: Sequence[int],
    target: float,
    source: dict[str, Any],
    by_partition: bool = False,
) -> dict[str, Any]:
    """The curve with its source and recommendation: what `tally lateness-curve --json`
    prints; `by_partition` adds the per-partition curve and recommendations."""
    curve = lateness_curve(events, window_ms, lateness_ms, target)
    report = {
        "source": source,
        "window_ms": window_ms,
        "target_pct": target,
        "curve": curve,
        "recommended": _bound(recommend(curve, target)),
    }
    if by_partition:
        report.update(partition_report(events, window_ms, lateness_ms, target))
    return report


def partition_report(
    events: DataFrame, window_ms: int, lateness_ms: Sequence[int], target: float
) -> dict[str, Any]:
    """`curve_by_partition`, `recommended_by_partition` ({"partition": bound or None}, keys
    as JSON has them) and `recommended_lateness_by_partition`, the recommendations as the
    setting's text (partitions without one are left out: they keep `lateness`)."""
    curve = lateness_curve_by_partition(events, window_ms, lateness_ms, target)
    best = recommend_by_partition(curve, target)
    found = {p: int(e["lateness_ms"]) for p, e in best.items() if e is not None}
    return {
        "curve_by_partition": curve,
        "recommended_by_partition": {str(p): _bound(e) for p, e in best.items()},
        "recommended_lateness_by_partition": format_partition_durations(found),
    }


def _bound(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    return {"lateness_ms": entry["lateness_ms"], "lateness": entry["lateness"]} if entry else None


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


def format_curve_by_partition(report: dict[str, Any]) -> str:
    """The per-partition table `tally lateness-curve --by-partition` prints after the curve."""
    lines = [
        f"{'partition':>9} {'lateness':>9} {'completeness':>13} {'dropped':>9} "
        f"{'dropped amount':>16}"
    ]
    for e in report["curve_by_partition"]:
        lines.append(
            f"{e['partition']:>9} {e['lateness']:>9} {e['completeness_pct']:>12.4f}% "
            f"{e['dropped']:>9,} {e['dropped_amount']:>16,}"
        )
    picks = [
        f"{p}: {best['lateness'] if best else 'none in the list'}"
        for p, best in report["recommended_by_partition"].items()
    ]
    lines.append(
        f"per partition, smallest lateness reaching {report['target_pct']}%: "
        + (", ".join(picks) if picks else "no events")
    )
    setting = report["recommended_lateness_by_partition"]
    if setting:
        lines.append(f"as a setting: TALLY_LATENESS_BY_PARTITION={setting}")
    return "\n".join(lines)
