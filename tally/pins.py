"""Audit pins that survive compaction, VACUUM and log cleanup: batch frontiers.

A reconciliation reads each stream table at a Delta version V (`versionAsOf`). That read
needs V's commit in the log and V's data files on storage: log cleanup (after
`delta.logRetentionDuration`) and VACUUM of compacted-away files (after
`delta.deletedFileRetentionDuration`) take them away. So a run also records, per stream table,
its **batch frontier** at V: for each `app_id` (one streaming query), the newest `batch_id` it
had committed to the table by V.

Why that is the same rows as "as of V", in any later snapshot: the stream's tables are
append-only (`delta.appendOnly`: Delta refuses a delete or update), compaction rewrites rows
without changing them, and one query appends its batches to a table in batch order (batch N+1
starts after N's writes returned; a replayed batch skips the appends its earlier attempt
committed), while the warehouse's lease keeps a second query out. So the rows of V are exactly
the rows whose (app_id, batch_id) is at or below the frontier; a row of a later batch, or of a
query that had not written by V, is above it.

Delta's row tracking (`_metadata.row_commit_version <= V`) would give the same read, but it was
measured to make each of the stream's small appends 3-4x slower (median 0.96-1.38 s against
0.24-0.40 s for a one-row append, 50 appends each, alternated): every commit reads the table's
row-id high-water mark, a state reconstruction. The frontier costs the stream nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from tally import tables
from tally.frontier import NO_APP, Frontier

__all__ = ["NO_APP", "Frontier", "frontier_of", "read_at_frontier", "within"]


def _app() -> Column:
    return F.coalesce(F.col("app_id"), F.lit(NO_APP))


def frontier_of(rows: DataFrame) -> Frontier:
    """The batch frontier of a stream table's rows (read at the pinned version): one small
    aggregate over two columns (one row per streaming query)."""
    found = rows.groupBy(_app().alias("app")).agg(F.max("batch_id").alias("batch")).collect()
    return {str(r["app"]): int(r["batch"]) for r in found if r["batch"] is not None}


def within(frontier: Mapping[str, int]) -> Column:
    """Rows at or below the frontier: (app_id, batch_id) of a query it names, no later batch
    (the Column twin of `tally.frontier.is_within`)."""
    if not frontier:
        return F.lit(False)
    bound = F.create_map(
        *[x for app, b in sorted(frontier.items()) for x in (F.lit(app), F.lit(b))]
    )
    return F.col("batch_id") <= F.try_element_at(bound, _app())


def read_at_frontier(
    spark: SparkSession, warehouse: str, name: str, frontier: Mapping[str, int]
) -> DataFrame:
    """The table's rows as of the pin, from its latest snapshot."""
    return tables.read_table(spark, warehouse, name).where(within(frontier))
