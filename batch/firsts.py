"""First arrival over the whole log at the cost of the day: the index of event ids
(`event_index`; `dedup = index`, the default; `dedup = full` ranks every repeated id of the
log instead, `batch.diff.repeated_ids`, and is the tests' oracle).

An event counts once, by its first arrival in the log (`tally.arrivals`), and its copies may
lie in any `event_date`, weeks apart. A date's windows can only hold events of its
`event_date` partitions P(D) (`tally.dates.utc_dates_of`: exactly the UTC dates its windows'
events are timed on), so what a date needs from the rest of the log is the copies of the ids
P(D) holds. The index says where they are without reading the log:

* **Entries.** One row per line of the log: the 64-bit hash of its event_id (`id_hash`,
  `batch.diff.id_hash`) and its `event_date` (the partition). No arrival order and no
  strings: the lines themselves are read for that, from the pinned log, so the ranking and
  the exact event_id comparison are the full path's (`tally.arrivals.marked_copies`).
* **Catch-up** (`catch_up`, after the run: the nightly's maintenance stage). The index covers,
  per app_id, the batches up to the largest frontier its catch-ups recorded
  (`event_index_catchups`, `tally.pins`); a catch-up reads only the log's lines above that,
  within the run's pin (Delta skips the files by their app_id and batch_id statistics),
  appends their entries and records the frontier it reached. A warehouse without the index
  builds it once, the same way from an empty frontier (the whole log). A run itself adds, in
  memory, the entries of the lines the index lacks outside its date's partitions
  (`index_for_run`: few, the files skipped the same way), so it never waits for the index.
* **Probe** (`day_copies`). The hashes of P(D)'s ids are matched against the entries outside
  P(D) (one scan of an 8-byte column; the day's hashes broadcast when they are small);
  then the pinned log is read only in the `event_date` partitions holding a hit, for the
  lines of the hit hashes. An entry of a line above the pin only costs a partition read: the
  lines come from the pinned log, so every pin, older runs' included, reads exactly its rows.

Writes: the nightly process only (`catch_up`), one writer per table; a run, `--reproduce`
included, only reads the index.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from batch import diff
from tally import tables
from tally.arrivals import marked_copies
from tally.dates import epoch_ms
from tally.frontier import NO_APP, Frontier, merged
from tally.pins import read_at_frontier

ID_HASH = diff.ID_HASH
BUILD = "build"
CATCH_UP = "catch_up"


def entries_of(lines: DataFrame) -> DataFrame:
    """The index rows of the log's `lines`: `id_hash`, `event_date` (a projection)."""
    return lines.select(diff.id_hash().alias("id_hash"), "event_date")


def _app_is(app: str) -> Column:
    if app == NO_APP:
        return F.col("app_id").isNull() | (F.col("app_id") == NO_APP)
    return F.col("app_id") == app


def above(pin: Mapping[str, int], covered: Mapping[str, int]) -> Column | None:
    """The log's lines within `pin` that the index does not cover yet (`covered`: its
    frontier): per app_id, the batches above it (simple comparisons of app_id and batch_id,
    which Delta skips files by); None: nothing to catch up."""
    terms = [
        _app_is(app) & (F.col("batch_id") > F.lit(covered.get(app, -1)))
        for app, batch in sorted(pin.items())
        if batch > covered.get(app, -1)
    ]
    if not terms:
        return None
    column = terms[0]
    for term in terms[1:]:
        column = column | term
    return column


def covered_frontier(spark: SparkSession, warehouse: str) -> Frontier | None:
    """The batches the index covers (per app_id, the largest batch its catch-ups recorded);
    None: no index yet."""
    if not tables.exists(spark, warehouse, tables.EVENT_INDEX_CATCHUPS.name):
        return None
    rows = (
        tables.read_table(spark, warehouse, tables.EVENT_INDEX_CATCHUPS.name)
        .select(F.explode("frontier").alias("app", "batch"))
        .groupBy("app")
        .agg(F.max("batch").alias("batch"))
        .collect()
    )
    if not rows:
        return None
    return {str(r["app"]): int(r["batch"]) for r in rows}


def index_for_run(
    spark: SparkSession,
    warehouse: str,
    events: DataFrame,
    pin: Mapping[str, int],
    dates: tuple[date, date],
) -> DataFrame:
    """The index as a run probes it: the table, plus (in memory) the entries of the pinned
    log's lines it does not cover yet outside the date's partitions `dates` (the lines inside
    them the run reads anyway). The table itself is caught up after the run (`catch_up`), so
    the re-aggregation never waits for the index."""
    covered = covered_frontier(spark, warehouse)
    todo = above(pin, covered or {})
    index = (
        None if covered is None else tables.read_table(spark, warehouse, tables.EVENT_INDEX.name)
    )
    if todo is None:
        return index if index is not None else tables.empty_frame(spark, tables.EVENT_INDEX)
    first, last = dates
    outside = ~F.col("event_date").between(F.lit(first), F.lit(last))
    missing = entries_of(events.where(todo & outside))
    return missing if index is None else index.unionByName(missing)


def catch_up(
    spark: SparkSession,
    warehouse: str,
    pin: Mapping[str, int],
    events_version: int,
    now: datetime,
) -> int | None:
    """Append the entries of the log's lines within `pin` (a run's batch frontier of `events`,
    read at it: `tally.pins`) that the index does not cover yet, and record the frontier
    reached; the first catch-up of a warehouse builds the index over its whole log. The rows
    appended; None: nothing to catch up."""
    covered = covered_frontier(spark, warehouse)
    todo = above(pin, covered or {})
    if todo is None:
        return None
    started = time.monotonic()
    lines = read_at_frontier(spark, warehouse, tables.EVENTS.name, pin).where(todo)
    tables.write_table(entries_of(lines), warehouse, tables.EVENT_INDEX)
    appended = _rows_appended(spark, warehouse)
    _record(
        spark,
        warehouse,
        (now, events_version),
        merged(covered or {}, pin),
        (BUILD if covered is None else CATCH_UP, appended),
        time.monotonic() - started,
    )
    return appended


def _rows_appended(spark: SparkSession, warehouse: str) -> int:
    """The rows the index's last commit appended (its operation metrics: no count job)."""
    from delta.tables import DeltaTable

    path = tables.table_path(warehouse, tables.EVENT_INDEX.name)
    last = DeltaTable.forPath(spark, path).history(1).select("operationMetrics").first()
    metrics = (last["operationMetrics"] if last is not None else None) or {}
    return int(metrics.get("numOutputRows", 0))


def _record(
    spark: SparkSession,
    warehouse: str,
    when: tuple[datetime, int],
    frontier: Frontier,
    what: tuple[str, int],
    seconds: float,
) -> None:
    """Append the catch-up's `event_index_catchups` row (`when`: its time and the events
    version of the pin; `what`: its kind and the rows appended)."""
    (now, events_version), (kind, appended) = when, what
    record = spark.range(1).select(
        F.timestamp_millis(F.lit(epoch_ms(now))).alias("caught_up_at"),
        F.lit(events_version).cast("long").alias("events_version"),
        tables.literal_map(frontier, "string", "bigint").alias("frontier"),
        F.lit(kind).alias("kind"),
        F.lit(appended).cast("long").alias("entries"),
        F.lit(seconds).cast("double").alias("seconds"),
    )
    tables.write_table(record, warehouse, tables.EVENT_INDEX_CATCHUPS)


def day_copies(
    events: DataFrame,
    index: DataFrame,
    dates: tuple[date, date],
    columns: Sequence[str],
    keep: Callable[[DataFrame], DataFrame],
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """The date's lines of the (pinned) log (`dates`: its partitions, P(D)) with `columns`
    and `ID_HASH`; the hashes of the ids P(D) holds more than once or that have lines in
    other partitions (`index`); and those other lines, from the pinned log:
    (day, repeated, outside). `keep` persists a frame for the run (the hits and the
    outside lines: read more than once)."""
    first, last = dates
    in_dates = F.col("event_date").between(F.lit(first), F.lit(last))
    day = events.where(in_dates).select(*columns, diff.id_hash().alias(ID_HASH))
    counted = day.select(ID_HASH).transform(diff.with_copy_counts)
    others = index.where(~in_dates)
    if others.limit(1).count() == 0:  # no line outside the date's partitions (a first day)
        # the repeats only: small (kept), not the day's hashes (20M rows at 20M)
        return day, keep(diff.repeated_of(counted)), keep(day.limit(0))
    counted = keep(counted)  # read twice: the repeats, the probe (one shuffle)
    twice = diff.repeated_of(counted)
    # the day's hashes from the same shuffle (a semi join's side may repeat a hash); the join
    # is left to adaptive execution, which broadcasts them when they are small (a day against
    # a long history) and does not when the day itself is large
    day_hashes = counted.select(F.col(ID_HASH).alias("id_hash"))
    hits = keep(
        others.join(day_hashes, "id_hash", "left_semi")
        .select(F.col("id_hash").alias(ID_HASH), "event_date")
        .distinct()
    )
    hit_dates = [r["event_date"] for r in hits.select("event_date").distinct().collect()]
    outside = keep(
        events.where(F.col("event_date").isin(hit_dates))
        .select(*columns, diff.id_hash().alias(ID_HASH))
        .join(F.broadcast(hits), [ID_HASH, "event_date"], "left_semi")
    )
    repeated = keep(twice.unionByName(outside.select(ID_HASH)).distinct())
    return day, repeated, outside


def ranked_copies(
    day: DataFrame, outside: DataFrame, hashes: DataFrame, order: Sequence[str]
) -> DataFrame:
    """The lines of `day` whose `ID_HASH` is in `hashes` (broadcast) and the `outside` lines,
    ranked per event_id (`tally.arrivals.marked_copies`) as `batch.diff.log_copies` ranks
    the whole log's: every line of those ids that could come first is among them."""
    lines = day.join(F.broadcast(hashes), ID_HASH, "left_semi").unionByName(outside)
    return marked_copies(lines, order)
