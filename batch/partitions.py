"""The date's figures per source partition, written by the reconciliation for the report
(`reconciliation_partitions`), so the report does not read the event log again.

    write_partition_figures(
        spark, warehouse, business_date, events, copies, explaining, bounds, now
    )

One row per source partition of the date (and per partition of a late row that explains a
window of the date), with the run's `run_time` (the `reconciliation_runs` row written after
it carries the same one: the report takes the figures only of the run it reports on):

* `events`, `late_events`: the log's events of the date on the partition (`event_time` in the
  day, `tally.arrivals.event_of_day`) and those of them marked `late`, both without the late
  rows that repeat an earlier event (beyond the stream's dedup horizon: not the first arrival
  of their event_id, `tally.arrivals`; a late row without an event_id repeats nothing and is
  left out too) -- what the report's "late events per source partition" shows;
* `lateness`: the late side-output rows that explain the date's windows (first arrivals, each
  (event, window) once: `tally.arrivals.explaining_late`), counted per `lateness_ms` -- the
  report's lateness histogram and estimated completeness curve, at any bound.

Whether a late line of the log is a first arrival comes from the run's ranked copies of the
log (`copies`: `batch.diff.log_copies`, already kept for the re-aggregation and the diff):
a line that is not its event_id's first arrival has a repeated id, and every line without an
id is ranked there too, so only those few lines are looked at; the log itself is read once,
narrowly, for the counts.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tally import tables
from tally.arrivals import (
    FIRST_ARRIVAL,
    event_of_day,
    partitions_of_day,
)
from tally.dates import DayBounds, epoch_ms
from tally.spark import without_adaptive_execution
from tally.sql_text import rows_sql
from tally.vocabulary import LATE

_FIGURES = ("partition", "events", "late_events")
# The columns of the log's ranked copies the figures read (`_log_counts`), besides the event_id
# and `first_arrival`.
FIGURE_COLUMNS = ("partition", "event_date", "event_time", "arrival_status")


def _log_counts(events: DataFrame, copies: DataFrame, bounds: DayBounds) -> list[dict[str, Any]]:
    """Per source partition: the date's events, its late rows, and the late rows that repeat
    an earlier event or have no event_id (from `copies`): one job, one narrow scan of the
    date's partitions of the log."""
    of_day = F.coalesce(event_of_day(bounds), F.lit(False))
    late = F.col("arrival_status") == LATE
    counts = (
        events.where(partitions_of_day(bounds) & of_day)  # the date's partitions only
        .groupBy("partition")
        .agg(F.count(F.lit(1)).alias("events"), F.count_if(late).alias("late"))
    )
    repeats = (
        copies.where(of_day & late & ~F.col(FIRST_ARRIVAL))
        .groupBy(F.col("partition").alias("_p"))
        .agg(F.count(F.lit(1)).alias("repeats"))
    )
    joined = counts.join(repeats, F.col("partition").eqNullSafe(F.col("_p")), "left")
    return [
        {
            "partition": r["partition"],
            "events": int(r["events"]),
            "late": int(r["late"]),
            "repeats": int(r["repeats"] or 0),
        }
        for r in joined.drop("_p").collect()
    ]


def partition_figures(
    events: DataFrame, copies: DataFrame, bounds: DayBounds
) -> list[dict[str, Any]]:
    """`partition`, `events`, `late_events` per source partition of the date (see the module
    docstring), by partition."""
    figures = []
    for c in _log_counts(events, copies, bounds):
        # a null partition's repeats are kept (the stream never writes one: null means 0),
        # as the report's figures always counted them (a join on the partition matches none)
        repeated = 0 if c["partition"] is None else c["repeats"]
        figures.append(
            {
                "partition": c["partition"],
                "events": c["events"] - repeated,
                "late_events": c["late"] - repeated,
            }
        )
    return sorted(figures, key=lambda f: (f["partition"] is not None, f["partition"]))


def _lateness(explaining: DataFrame) -> DataFrame:
    """Per partition, the explaining late rows per `lateness_ms`, as the table's array."""
    per_ms = explaining.groupBy("partition", "lateness_ms").agg(
        F.count(F.lit(1)).cast("long").alias("late_rows")
    )
    entry = F.struct(F.col("lateness_ms"), F.col("late_rows"))
    return per_ms.groupBy(F.col("partition").alias("_p")).agg(
        F.array_sort(F.collect_list(entry)).alias("lateness")
    )


def write_partition_figures(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    events: DataFrame,
    copies: DataFrame,
    explaining: DataFrame,
    bounds: DayBounds,
    now: datetime,
) -> None:
    """Replace the date's `reconciliation_partitions` rows (see the module docstring).
    `events`: the pinned log; `copies`: its ranked copies (`batch.diff.log_copies`, with
    `FIGURE_COLUMNS`); `explaining`: the diff's late rows that explain
    (`batch.diff.explaining_rows`; both persisted by the caller); `now`: the run time
    `reconciliation_runs` records."""
    table = tables.RECONCILIATION_PARTITIONS
    with without_adaptive_execution(spark):  # a few rows per partition: AQE would add jobs
        figures = partition_figures(events, copies, bounds)
        fields = [f for f in table.schema().fields if f.name in _FIGURES]
        lateness = _lateness(explaining)
        if figures:
            logged = spark.sql(rows_sql(figures, fields))
            rows = logged.join(lateness, F.col("partition").eqNullSafe(F.col("_p")), "full")
            partition = F.coalesce(F.col("partition"), F.col("_p"))
        else:  # no event of the date in the log (nor, then, a late row of it)
            counts = [F.lit(None).cast("long").alias(c) for c in _FIGURES[1:]]
            rows, partition = lateness.select("*", *counts), F.col("_p")
        empty = F.array().cast(table.schema()["lateness"].dataType)
        out = rows.select(
            F.lit(business_date).alias("business_date"),
            F.timestamp_millis(F.lit(epoch_ms(now))).alias("run_time"),
            partition.alias("partition"),
            *[F.coalesce(F.col(c), F.lit(0)).alias(c) for c in _FIGURES[1:]],
            F.coalesce(F.col("lateness"), empty).alias("lateness"),
        )
        tables.write_table(
            out,
            warehouse,
            table,
            replace_where=f"business_date = DATE'{business_date.isoformat()}'",
        )
