"""The lateness bounds the stream had in force: read from `stream_progress.partition_lateness_ms`
(one map per micro-batch: the bound of each known partition after the batch, fixed or chosen
by lateness auto), summarised per partition over a set of micro-batches as the smallest, the
largest and the last bound (last by processing time, then batch id). The reconciliation records
the summary of the batches that carried its date; the weekly tuning that of its period."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from tally.dates import DayBounds, carried_day

# The summary's columns: {partition: bound ms} maps (null when no batch recorded a bound).
BOUND_COLUMNS = (
    "partition_lateness_min_ms",
    "partition_lateness_max_ms",
    "partition_lateness_last_ms",
)


def bounds_per_partition(progress: DataFrame) -> DataFrame:
    """Per partition of the micro-batches' `partition_lateness_ms`: `partition`, `min_ms`,
    `max_ms`, `last_ms` and `batches` (how many batches recorded one for it)."""
    last = F.struct(F.col("processing_time"), F.col("app_id"), F.col("batch_id"))
    return (
        progress.select(
            "processing_time",
            "app_id",
            "batch_id",
            F.explode("partition_lateness_ms").alias("partition", "bound_ms"),
        )
        .where(F.col("bound_ms").isNotNull())
        .groupBy("partition")
        .agg(
            F.min("bound_ms").alias("min_ms"),
            F.max("bound_ms").alias("max_ms"),
            F.max_by("bound_ms", last).alias("last_ms"),
            F.count(F.lit(1)).alias("batches"),
        )
    )


def _as_map(value: str) -> Column:
    """{partition: value} over the per-partition rows, sorted by partition; null when empty."""
    entries = F.array_sort(F.collect_list(F.struct(F.col("partition"), F.col(value))))
    return F.when(F.size(entries) > 0, F.map_from_entries(entries))


def bounds_in_force(progress: DataFrame) -> DataFrame:
    """One row of the three `BOUND_COLUMNS` maps over all of `progress`'s micro-batches."""
    per = bounds_per_partition(progress)
    return per.agg(
        *(
            _as_map(v).alias(c)
            for v, c in zip(("min_ms", "max_ms", "last_ms"), BOUND_COLUMNS, strict=True)
        )
    )


def bounds_of_day(progress: DataFrame | None, bounds: DayBounds) -> DataFrame | None:
    """`bounds_in_force` over the micro-batches that carried the day (`carried_day`); None
    without a `stream_progress` table or its bounds column."""
    if progress is None or "partition_lateness_ms" not in progress.columns:
        return None  # no stream yet, or one from before the bounds were recorded
    return bounds_in_force(progress.where(carried_day(bounds)))
