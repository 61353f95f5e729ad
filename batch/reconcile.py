"""The batch layer: re-aggregate a business date from the event log and audit the stream.

    reconcile(spark, warehouse, business_date, window_ms, report_timezone="UTC",
              events_version=None, stream_versions=None, *, now, settings=None)
        -> ReconcileResult

1. **Re-aggregation.** The `events` log is read AS OF a pinned Delta version, deduplicated by
   `event_id` (the first arrival wins; arrival order = `ingest_time`, `batch_id`,
   `source_mtime`, `source_file`, `source_line`), windowed and aggregated with the shared
   `tally.windows` code, and written to `batch_aggregates` for the date.
2. **Diff.** Per `(window_start, window_end, key)` of the date: the batch totals, the stream's
   answer (highest final `revision` in `stream_aggregates`, pinned version) and the late side
   output totals (`late_events`, pinned version) are full-outer-joined into `reconciliation`, with a
   status; `reconciliation_summary` holds the day's totals. A late row counts only if it is
   the first arrival of its `event_id` in the pinned `events` log (the rule of step 1), each
   `event_id` once: a repeat the stream no longer recognized (beyond its dedup horizon) lands
   in `late_events`, but the batch does not count it, so neither do the late totals. The
   number of such repeats is `ReconcileResult.late_repeats` (logged and described; no table
   column).
3. **Provenance.** `reconciliation_runs` records the versions read and the settings, so a run
   can be reproduced exactly (`reproduce`), whatever was appended since.

Business date of a window: the date, in `report_timezone`, on which its `window_start` falls.
A window that straddles midnight (possible when the window size does not divide the day, or
with a zone whose offset is not a multiple of it) therefore belongs to the *earlier* date,
together with all its events, including those timed after midnight.

Session windows (`session_gap_ms`; docs/semantics.md, "Session windows", "In the nightly";
`batch.sessions`): the truth is the sessions of first arrivals that start on the date, read
from `D` before it to `D` after it, widened a day at a time (at most 31) while a session of
the date reaches the end of what was read. The stream's answer is its current final sessions
(highest final revision per session, minus the retracted). Each row of the diff is a batch
session `B`: its stream side is the stream's sessions of B's key inside B, its late side the
late rows of B's key whose event time is in B. A stream session or late row in no batch
session is its own UNEXPLAINED row (batch 0) on the date its start falls on.

Every output table is partitioned by `business_date` and written with Delta `replaceWhere`
on that date: re-running a date replaces exactly that date, atomically. The date partitions
do not record the time zone: use one `report_timezone` per warehouse.

Statuses (all arithmetic is exact BIGINT; a side without a row counts as 0):

* `MATCH`: the stream has the window, stream == batch (count and amount), no late events.
* `EXPLAINED_BY_LATE`: the stream has the window and batch − stream == late totals (count and
  amount) exactly, with at least one late event.
* `MISSING_IN_STREAM`: the stream has no row for the window and batch == late totals exactly
  (the whole window arrived late), with at least one late event.
* `UNEXPLAINED`: anything else. Exactly these rows have a nonzero residual
  (`residual = (batch − stream) − late`), shown in `residual_count` / `residual_amount`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import reduce
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from batch.bounds import BOUND_COLUMNS, bounds_of_day
from batch.partitions import FIGURE_COLUMNS, write_partition_figures
from batch.sessions import (
    SessionError,
    check_session_width,
    date_sessions,
    late_per_session,
    session_aggregates,
    stream_per_session,
    stream_reach_ms,
)
from tally import tables as T
from tally.arrivals import (
    FIRST_ARRIVAL,
    FIRST_COPY,
    LINE_IDENTITY,
    explaining_late,
    first_lines,
    marked_copies,
    marked_first,
)
from tally.dates import (
    DayBounds,
    business_day_bounds,
    epoch_ms,
    utc_dates_touching,
    window_in_day,
)
from tally.settings import windowing_problem
from tally.spark import without_adaptive_execution
from tally.vocabulary import (
    ARRIVAL_ORDER,
    EXPLAINED_BY_LATE,
    LATE_ARRIVAL_ORDER,
    MATCH,
    MISSING_IN_STREAM,
    UNEXPLAINED,
)
from tally.windows import (
    WINDOW_KEY,
    aggregate_windows,
    describe_windowing,
    slide_of,
    window_kind,
    with_windows,
)

log = logging.getLogger("tally.reconcile")

WORST_KEYS = 5
BATCH_TABLES = T.RECONCILE_TABLES
INPUT_TABLES = (T.EVENTS, T.STREAM_AGGREGATES, T.LATE_EVENTS)


# The columns of `late_events` the diff reads (`late_arrivals`, `late_totals`) and the figures
# per partition (`batch.partitions`).
LATE_COLUMNS = tuple(
    dict.fromkeys(
        (
            *WINDOW_KEY,
            "event_id",
            "amount",
            "event_time",
            "partition",
            "lateness_ms",
            *LINE_IDENTITY,
            *LATE_ARRIVAL_ORDER,
        )
    )
)


class ReconcileError(RuntimeError):
    """The run cannot start (missing table, bad argument): a one-line message."""


# -- pure DataFrame logic --------------------------------------------------------------------


ID_HASH = "_id_hash"


def id_hash() -> Column:
    """A 64-bit hash of `event_id`: ids are counted by it (8 bytes a row on the shuffle
    instead of the id). Distinct ids that share a hash only take the exact path together."""
    return F.xxhash64("event_id")


def repeated_ids(events: DataFrame) -> DataFrame:
    """`ID_HASH` of every event_id with more than one copy in the log (and of distinct ids
    that share a hash): one column, one row per hash, small (duplicates are few)."""
    return (
        events.select(id_hash().alias(ID_HASH))
        .groupBy(ID_HASH)
        .count()
        .where(F.col("count") > 1)
        .select(ID_HASH)
    )


def ranked_hashes(repeated: DataFrame, late_rows: DataFrame) -> DataFrame:
    """`ID_HASH` of the event_ids whose lines a run ranks (`log_copies`): the `repeated` ones
    (`repeated_ids` of the log), the id of every row of `late_rows` (a late row is a first
    arrival only if the log's first line of its id is its line), and a null id (the figures
    per partition count a late line without an id as a repeat). Small; not made distinct (a
    hash twice on the broadcast side of a semi-join is harmless)."""
    late = late_rows.select(id_hash().alias(ID_HASH))
    no_id = late_rows.sparkSession.range(1).select(
        F.xxhash64(F.lit(None).cast("string")).alias(ID_HASH)
    )
    return repeated.unionByName(late).unionByName(no_id)


# The columns of the log's copies a run keeps (`log_copies`): what `day_events` reads, the
# lines `late_arrivals` compares and what the figures per partition count.
COPY_COLUMNS = tuple(
    dict.fromkeys(
        ("event_id", "key", "amount", "event_time", *ARRIVAL_ORDER, *LINE_IDENTITY, *FIGURE_COLUMNS)
    )
)


def log_copies(
    events: DataFrame,
    hashes: DataFrame,
    order: Sequence[str] = ARRIVAL_ORDER,
    columns: Sequence[str] = COPY_COLUMNS,
) -> DataFrame:
    """Every line of the log (all of it: an id's copies may lie in any `event_date`) whose
    `ID_HASH` is in `hashes` (broadcast), its `columns` and `ID_HASH`, ranked per event_id in
    `order` (`tally.arrivals.marked_copies`: `FIRST_COPY`, `FIRST_ARRIVAL`)."""
    lines = events.select(*columns, id_hash().alias(ID_HASH))
    return marked_copies(lines.join(F.broadcast(hashes), ID_HASH, "left_semi"), order)


@dataclass(frozen=True)
class Copies:
    """`repeated_ids` of a log, and the log's lines of (at least) those ids, ranked
    (`log_copies`)."""

    repeated: DataFrame
    lines: DataFrame


def day_events(
    events: DataFrame,
    business_date: date,
    window_ms: int,
    report_timezone: str = "UTC",
    order: Sequence[str] = ARRIVAL_ORDER,
    slide_ms: int | None = None,
    copies: Copies | None = None,
) -> DataFrame:
    """Deduplicated events (first arrival wins) whose window belongs to the business date,
    with `window_start`/`window_end`: one row per (event, window of the date), S/H windows
    per event when they hop (`slide_ms`; None: tumbling). `copies`: the log's copies ranked
    in `order`, if the caller has them (None: those of `repeated_ids(events)`).

    Equivalent to deduplicating the whole log and then filtering, without moving the wide
    rows: an id with one copy is its own first arrival, so only the copies of the repeated
    ids (a broadcast set of hashes, a few per cent of the log) are ranked by the window
    function; the single copies stream through from the date's partitions (a single copy
    can only belong to the day if it is in them).
    """
    bounds = business_day_bounds(business_date, report_timezone)
    first, last = utc_dates_touching(bounds, window_ms)
    needed = list(dict.fromkeys(["event_id", "key", "amount", "event_time", *order]))
    if copies is None:
        repeated = repeated_ids(events)
        lines = log_copies(events, repeated, order, list(dict.fromkeys((*needed, *LINE_IDENTITY))))
        copies = Copies(repeated, lines)
    repeated = F.broadcast(copies.repeated)
    singles = (
        events.where(F.col("event_date").between(F.lit(first), F.lit(last)))
        .select(*needed, id_hash().alias(ID_HASH))
        .join(repeated, ID_HASH, "left_anti")
    )
    # the first copies of the repeated ids (`copies` may hold those of other ids too)
    firsts = copies.lines.where(F.col(FIRST_COPY)).join(repeated, ID_HASH, "left_semi")
    return (
        singles.unionByName(firsts.select(*needed, ID_HASH))
        .drop(ID_HASH)
        .transform(lambda df: with_windows(df, window_ms, slide_ms))
        .where(window_in_day(bounds))
    )


def batch_aggregates(
    events: DataFrame,
    business_date: date,
    window_ms: int,
    report_timezone: str = "UTC",
    slide_ms: int | None = None,
    copies: Copies | None = None,
) -> DataFrame:
    """Rows of `batch_aggregates` for the date, from the (pinned) event log (`copies`: as
    `day_events` takes them)."""
    deduped = day_events(
        events, business_date, window_ms, report_timezone, slide_ms=slide_ms, copies=copies
    )
    return aggregate_windows(deduped).select(
        F.lit(business_date).alias("business_date"), *WINDOW_KEY, "event_count", "amount_sum"
    )


def final_rows(stream_aggregates: DataFrame) -> DataFrame:
    """The final rows of `stream_aggregates` (a version from before early firings has no
    `final` column: every row of it is final; so is a row whose `final` is null)."""
    if "final" not in stream_aggregates.columns:
        return stream_aggregates
    return stream_aggregates.where(F.coalesce(F.col("final"), F.lit(True)))


def not_retracted(rows: DataFrame) -> DataFrame:
    """Rows that do not withdraw a session (`retracted` is null in rows from before session
    windows, and false in every fixed-window row)."""
    if "retracted" not in rows.columns:
        return rows
    return rows.where(~F.coalesce(F.col("retracted"), F.lit(False)))


def latest_stream(stream_aggregates: DataFrame, bounds: DayBounds) -> DataFrame:
    """The stream's answer per window and key of the day: its highest final revision (early
    rows, `final = false`, are speculative: superseded by the final ones; rows from before
    early firings have no `final` and are final), unless that row is `retracted` (session
    windows: what is left is the stream's current set of final sessions)."""
    rank = F.row_number().over(
        Window.partitionBy(*WINDOW_KEY).orderBy(
            F.col("revision").desc(), F.col("emit_time").desc(), F.col("batch_id").desc()
        )
    )
    return (
        final_rows(stream_aggregates.where(window_in_day(bounds)))
        .withColumn("_rank", rank)
        .where("_rank = 1")
        .transform(not_retracted)
        .select(*WINDOW_KEY, "event_count", "amount_sum")
    )


def late_arrivals(late_events: DataFrame, copies: DataFrame, bounds: DayBounds) -> DataFrame:
    """The late side-output rows of the day's windows, each with `first_arrival`: whether it is
    the first arrival of its event_id in the (pinned) event log. A row that is not is a repeat
    the stream no longer recognized (beyond its dedup horizon): the batch does not count it.

    `copies`: the log's lines of (at least) these rows' ids, ranked (`log_copies` of
    `ranked_hashes`): the log is not read again; ids of null are left out as in
    `tally.arrivals.with_first_arrival`."""
    return marked_first(late_events.where(window_in_day(bounds)), first_lines(copies))


def late_totals(late: DataFrame) -> DataFrame:
    """Late side output totals per window and key, with the largest lateness, from
    `late_arrivals`: only rows that are first arrivals explain a gap, each event_id once (so
    a repeated write could not inflate the explanation either). The count and sum are
    `aggregate_windows`' expressions; the windows are the ones the stream recorded."""
    return (
        explaining_late(late)
        .groupBy(*WINDOW_KEY)
        .agg(
            F.count(F.lit(1)).alias("event_count"),
            F.sum("amount").cast("long").alias("amount_sum"),
            F.max("lateness_ms").cast("long").alias("max_lateness"),
        )
    )


def status_column(
    in_stream: Column,
    stream: tuple[Column, Column],
    batch: tuple[Column, Column],
    late: tuple[Column, Column],
) -> Column:
    """The status of a window from its (count, amount) pairs; all non-null BIGINT."""
    (s_count, s_amount), (b_count, b_amount), (l_count, l_amount) = stream, batch, late
    no_late = (l_count == 0) & (l_amount == 0)
    diff_is_late = ((b_count - s_count) == l_count) & ((b_amount - s_amount) == l_amount)
    batch_is_late = (b_count == l_count) & (b_amount == l_amount)
    return (
        F.when(in_stream & (s_count == b_count) & (s_amount == b_amount) & no_late, F.lit(MATCH))
        .when(in_stream & diff_is_late & ~no_late, F.lit(EXPLAINED_BY_LATE))
        .when(~in_stream & batch_is_late & ~no_late, F.lit(MISSING_IN_STREAM))
        .otherwise(F.lit(UNEXPLAINED))
    )


def diff_windows(
    batch: DataFrame, stream: DataFrame, late: DataFrame, business_date: date
) -> DataFrame:
    """Rows of `reconciliation`: batch (WINDOW_KEY, event_count, amount_sum) vs the stream's
    latest revision vs late totals (`late_totals`), full outer, exact BIGINT arithmetic.

    Each side has at most one row per window and key, so the full outer join of the three is
    their union grouped by WINDOW_KEY: one shuffle and a hash aggregate instead of two sort-
    merge joins (each side's columns are null in the other sides' rows)."""
    sides = [
        batch.select(
            *WINDOW_KEY,
            F.col("event_count").alias("_b_count"),
            F.col("amount_sum").alias("_b_amount"),
        ),
        stream.select(
            *WINDOW_KEY,
            F.col("event_count").alias("_s_count"),
            F.col("amount_sum").alias("_s_amount"),
            F.lit(True).alias("_in_stream"),
        ),
        late.select(
            *WINDOW_KEY,
            F.col("event_count").alias("_l_count"),
            F.col("amount_sum").alias("_l_amount"),
            F.col("max_lateness").alias("max_lateness_ms"),
        ),
    ]
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), sides)
    side_columns = [c for side in sides for c in side.columns if c not in WINDOW_KEY]
    joined = union.groupBy(*WINDOW_KEY).agg(*[F.max(c).alias(c) for c in side_columns])

    def zero(name: str) -> Column:
        return F.coalesce(F.col(name), F.lit(0)).cast("long")

    stream_pair = (zero("_s_count"), zero("_s_amount"))
    batch_pair = (zero("_b_count"), zero("_b_amount"))
    late_pair = (zero("_l_count"), zero("_l_amount"))
    in_stream = F.col("_in_stream").isNotNull()
    diff_count = batch_pair[0] - stream_pair[0]
    diff_amount = batch_pair[1] - stream_pair[1]
    return joined.select(
        F.lit(business_date).alias("business_date"),
        *WINDOW_KEY,
        stream_pair[0].alias("stream_count"),
        stream_pair[1].alias("stream_amount"),
        batch_pair[0].alias("batch_count"),
        batch_pair[1].alias("batch_amount"),
        diff_count.alias("diff_count"),
        diff_amount.alias("diff_amount"),
        late_pair[0].alias("late_count"),
        late_pair[1].alias("late_amount"),
        (diff_count - late_pair[0]).alias("residual_count"),
        (diff_amount - late_pair[1]).alias("residual_amount"),
        F.col("max_lateness_ms").cast("long").alias("max_lateness_ms"),
        status_column(in_stream, stream_pair, batch_pair, late_pair).alias("status"),
    )


def summarize(reconciliation: DataFrame, business_date: date) -> DataFrame:
    """The one `reconciliation_summary` row of the date (one row even with no windows).

    gap = batch − stream; explained = the late side output totals of the date's windows;
    unexplained = the sum of residuals (signed; nonzero only on UNEXPLAINED rows), so
    gap = explained + unexplained exactly; `unexplained_abs_amount` = sum of |residual_amount|
    (residuals of opposite sign cannot hide each other there); `unexplained_windows` = number
    of UNEXPLAINED rows. worst_keys: up to 5 keys with a nonzero residual or diff, by
    sum |residual_amount| desc, then sum |diff_amount| desc, then key.
    """
    r = reconciliation

    def total(name: str) -> Column:
        return F.coalesce(F.sum(name), F.lit(0)).cast("long")

    def windows_with(status: str) -> Column:
        return F.count_if(F.col("status") == status).cast("long")

    per_key = r.groupBy("key").agg(
        F.sum(F.abs("residual_amount")).alias("abs_residual"),
        F.sum(F.abs("diff_amount")).alias("abs_diff"),
        F.sum(F.abs("residual_count") + F.abs("diff_count")).alias("abs_counts"),
    )
    off = (F.col("abs_residual") != 0) | (F.col("abs_diff") != 0) | (F.col("abs_counts") != 0)
    ranked = F.array_sort(
        F.collect_list(
            F.struct(
                (-F.col("abs_residual")).alias("r"),
                (-F.col("abs_diff")).alias("d"),
                F.col("key").alias("k"),
            )
        )
    )
    worst = (
        per_key.where(off)
        .agg(ranked.alias("ranked"))
        .select(F.slice(F.col("ranked.k"), 1, WORST_KEYS).alias("worst_keys"))
    )
    totals = r.agg(
        F.count(F.lit(1)).cast("long").alias("windows"),
        total("stream_count").alias("stream_count"),
        total("stream_amount").alias("stream_amount"),
        total("batch_count").alias("batch_count"),
        total("batch_amount").alias("batch_amount"),
        total("diff_count").alias("gap_count"),
        total("diff_amount").alias("gap_amount"),
        total("late_count").alias("explained_count"),
        total("late_amount").alias("explained_amount"),
        windows_with(UNEXPLAINED).alias("unexplained_windows"),
        total("residual_count").alias("unexplained_count"),
        total("residual_amount").alias("unexplained_amount"),
        F.coalesce(F.sum(F.abs("residual_amount")), F.lit(0))
        .cast("long")
        .alias("unexplained_abs_amount"),
        total("late_count").alias("late_events"),
        total("late_amount").alias("late_amount"),
        F.max("max_lateness_ms").cast("long").alias("max_lateness_ms"),
        windows_with(MATCH).alias("match_windows"),
        windows_with(EXPLAINED_BY_LATE).alias("explained_by_late_windows"),
        windows_with(MISSING_IN_STREAM).alias("missing_in_stream_windows"),
    )
    rate = F.when(
        F.col("batch_count") > 0, F.col("late_events").cast("double") / F.col("batch_count")
    )
    return totals.crossJoin(worst).select(
        F.lit(business_date).alias("business_date"),
        *totals.columns,
        rate.alias("late_event_rate"),
        F.coalesce(F.col("worst_keys"), F.array().cast("array<string>")).alias("worst_keys"),
    )


# -- the run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReconcileFrames:
    """What a run read and wrote, for the later stages of the same process (`reconcile`'s
    `keep_frames`): the pinned reads, the date's `reconciliation` rows as written (persisted
    until `release`) and its `reconciliation_runs` row. Validation and the report take them
    instead of reading the tables back (a Delta file listing, and a snapshot of each version
    just written, per read)."""

    events: DataFrame
    stream_aggregates: DataFrame
    late_events: DataFrame
    stream_progress: DataFrame | None
    reconciliation: DataFrame
    run: dict[str, Any]

    def release(self) -> None:
        self.reconciliation.unpersist()


@dataclass(frozen=True)
class ReconcileResult:
    business_date: date
    events_version: int
    stream_aggregates_version: int
    late_events_version: int
    window_ms: int
    report_timezone: str
    summary: dict[str, Any] = field(default_factory=dict)
    # Late side-output rows of the date's windows that are not the first arrival of their
    # event_id (repeats beyond the stream's dedup horizon): left out of the late totals.
    late_repeats: int = 0
    window_slide_ms: int | None = None  # hopping windows slide by this (None: tumbling)
    session_gap_ms: int = 0  # session windows with this gap (0: fixed windows)
    # the stream_progress version whose bounds in force it recorded (None: no such table)
    stream_progress_version: int | None = None
    # what it read and wrote, when asked to keep it (`keep_frames`); the caller releases it
    frames: ReconcileFrames | None = field(default=None, compare=False, repr=False)

    @property
    def windowing(self) -> str:
        """`tumbling 1m`, `hopping 5m every 1m` or `session, gap 10s`."""
        return describe_windowing(self.window_ms, self.window_slide_ms, self.session_gap_ms)

    @property
    def unexplained_windows(self) -> int:
        return int(self.summary["unexplained_windows"])

    @property
    def balanced(self) -> bool:
        return self.unexplained_windows == 0

    @property
    def stream_versions(self) -> dict[str, int]:
        versions = {
            "stream_aggregates": self.stream_aggregates_version,
            "late_events": self.late_events_version,
        }
        if self.stream_progress_version is not None:
            versions["stream_progress"] = self.stream_progress_version
        return versions

    def describe(self) -> str:
        """The one-paragraph summary the CLI prints."""
        s = self.summary
        rate = s["late_event_rate"]
        kind = f"windows: {self.windowing}"
        lines = [
            f"Reconciliation of {self.business_date.isoformat()} ({self.report_timezone}, "
            f"{kind}; events v{self.events_version}, stream_aggregates "
            f"v{self.stream_aggregates_version}, late_events v{self.late_events_version}): "
            f"{s['windows']:,} windows;",
            f"batch {s['batch_count']:,} events / {s['batch_amount']:,},",
            f"stream {s['stream_count']:,} events / {s['stream_amount']:,};",
            f"gap {s['gap_count']:,} events / {s['gap_amount']:,},",
            f"explained by late events {s['explained_count']:,} / {s['explained_amount']:,}",
            f"({s['explained_by_late_windows']:,} windows explained, "
            f"{s['missing_in_stream_windows']:,} missing in stream);",
            f"unexplained {s['unexplained_windows']:,} windows "
            f"(residual {s['unexplained_count']:,} events / {s['unexplained_amount']:,}, "
            f"|residual| {s['unexplained_abs_amount']:,});",
            "late rate "
            + ("n/a" if rate is None else f"{rate:.4%}")
            + (
                f" (max lateness {s['max_lateness_ms']:,} ms)."
                if s["max_lateness_ms"] is not None
                else "."
            ),
        ]
        if self.late_repeats:
            lines.append(
                f"{self.late_repeats:,} late rows repeat an earlier event (beyond the dedup "
                "horizon): not counted."
            )
        if s["worst_keys"]:
            lines.append(f"Worst keys: {', '.join(s['worst_keys'])}.")
        lines.append("BALANCED." if self.balanced else "UNEXPLAINED DIFFERENCES.")
        return " ".join(lines)


def _require_tables(spark: SparkSession, warehouse: str) -> None:
    for table in INPUT_TABLES:
        if not T.exists(spark, warehouse, table.name):
            raise ReconcileError(
                f"{table.name}: no Delta table at {T.table_path(warehouse, table.name)} "
                "(run the speed layer first)"
            )


def _ensure_outputs(spark: SparkSession, warehouse: str) -> None:
    """Bring the existing output tables up to date (a file-system check each). A missing one
    is created by its first write (`T.creates_on_write`): creating it empty first cost a
    commit, and the write after it a snapshot of that commit (a fresh warehouse: 16 Spark
    jobs of the nightly's ~190)."""
    for table in BATCH_TABLES:
        if not T.exists(spark, warehouse, table.name):
            if not T.creates_on_write(table):
                T.ensure_table(spark, warehouse, table)
        elif table is T.RECONCILIATION_RUNS:  # it gained the bounds in force
            T.add_missing_columns(spark, warehouse, table)


def _pin(spark: SparkSession, warehouse: str, name: str, version: int | None) -> int:
    latest = T.latest_version(spark, warehouse, name)
    if version is None:
        return latest
    if not 0 <= version <= latest:
        raise ReconcileError(f"{name}: version {version} does not exist (latest is {latest})")
    return int(version)


def _replace_date(df: DataFrame, warehouse: str, table: T.Table, business_date: date) -> None:
    T.write_table(
        df, warehouse, table, replace_where=f"business_date = DATE'{business_date.isoformat()}'"
    )


def _read_date(
    spark: SparkSession, warehouse: str, table: T.Table, business_date: date
) -> DataFrame:
    return T.read_table(spark, warehouse, table.name).where(
        F.col("business_date") == F.lit(business_date)
    )


def _window_width() -> Column:
    return F.unix_millis("window_end") - F.unix_millis("window_start")


def stream_window_ms(
    spark: SparkSession,
    warehouse: str,
    business_date: date | None = None,
    report_timezone: str = "UTC",
) -> int | None:
    """The window size the stream recorded in `stream_aggregates` (of the date's windows when
    a date is given and has any, else of the newest row); None when it emitted nothing."""
    rows = T.read_table(spark, warehouse, T.STREAM_AGGREGATES.name)
    if business_date is not None:
        bounds = business_day_bounds(business_date, report_timezone)
        of_day = rows.where(window_in_day(bounds)).select(_window_width().alias("ms")).first()
        if of_day is not None:
            return int(of_day["ms"])
    newest = rows.orderBy(F.col("emit_time").desc()).select(_window_width().alias("ms")).first()
    return None if newest is None else int(newest["ms"])


def _check_window_size(
    stream: DataFrame, window_ms: int, business_date: date, slide_ms: int | None = None
) -> None:
    """The stream's windows of the date have the size, and start on the slide's grid (a
    hopping stream reconciled as tumbling windows would fail here)."""
    width = _window_width()
    slide = slide_of(window_ms, slide_ms)
    off_grid = F.pmod(F.unix_millis("window_start"), F.lit(slide)) != F.lit(0)
    # one aggregate (one job; `first()` of a filter that matches nothing ran a job per
    # growing batch of files): the earliest offending window, a wrong width before a slide
    offending = stream.where((width != F.lit(window_ms)) | off_grid).select(
        F.struct(
            (width == F.lit(window_ms)).alias("width_ok"),
            F.unix_millis("window_start").alias("start"),
            width.alias("ms"),
        ).alias("o")
    )
    found = offending.agg(F.min("o").alias("o")).first()
    other = None if found is None else found["o"]
    if other is None:
        return
    if other["ms"] != window_ms:
        raise ReconcileError(
            f"window: stream_aggregates holds {other['ms']} ms windows on "
            f"{business_date.isoformat()}, but the window is {window_ms} ms"
        )
    raise ReconcileError(
        f"window_slide: stream_aggregates holds a window starting at {other['start']} ms on "
        f"{business_date.isoformat()}, off the {slide} ms slide (did the stream hop?)"
    )


def _checked_windowing(window_ms: int, slide_ms: int | None, gap_ms: int) -> None:
    """The window, slide and session gap make one windowing (one-line ReconcileError)."""
    problem = windowing_problem(window_ms, slide_ms, gap_ms)
    if problem is not None:
        raise ReconcileError(problem)


def _checked_bounds(
    windowing: tuple[int, int | None, int],
    now: datetime,
    stream_versions: Mapping[str, Any],
    business_date: date,
    zone: str,
) -> DayBounds:
    """The date's bounds, after the arguments are checked (one-line ReconcileError);
    `windowing` is (window_ms, slide_ms, session_gap_ms)."""
    _checked_windowing(*windowing)
    if now.tzinfo is None:
        raise ReconcileError("now: needs a time zone")
    unknown = set(stream_versions) - {"stream_aggregates", "late_events", "stream_progress"}
    if unknown:
        raise ReconcileError(
            f"stream_versions: unknown table(s) {', '.join(sorted(unknown))} "
            "(expected stream_aggregates, late_events, stream_progress)"
        )
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, IsADirectoryError):  # not a zone's name
        raise ReconcileError(f"report_timezone: unknown time zone {zone!r}") from None
    try:
        return business_day_bounds(business_date, zone)
    except OverflowError:  # the last date there is has no next midnight
        raise ReconcileError(f"business_date: {business_date} has no end (out of range)") from None


def _windowing_settings(window_ms: int, slide_ms: int | None, gap_ms: int) -> dict[str, Any]:
    """How the run windowed, as `reconciliation_runs.settings` records it (a session run has
    no slide; a fixed-window run records no gap, as before session windows)."""
    if gap_ms:
        return {
            "window_ms": window_ms,
            "window_slide_ms": None,
            "session_gap_ms": gap_ms,
            "window_kind": window_kind(window_ms, None, gap_ms),
        }
    return {
        "window_ms": window_ms,
        "window_slide_ms": slide_of(window_ms, slide_ms),
        "window_kind": window_kind(window_ms, slide_ms),
    }


def _provenance(
    summary_df: DataFrame,
    versions: tuple[int, int, int],
    windowing: tuple[int, int | None, int],
    report_timezone: str,
    now: datetime,
    settings: Mapping[str, Any] | None,
) -> DataFrame:
    """The `reconciliation_runs` row: what was read (versions), with which settings;
    `windowing` is (window_ms, slide_ms, session_gap_ms). The stream's bounds in force are
    joined on by the caller (`_with_bounds`)."""
    ev, sv, lv = versions
    window_ms = windowing[0]
    settings_json = json.dumps(
        {
            **dict(settings or {}),
            **_windowing_settings(*windowing),
            "report_timezone": report_timezone,
        },
        sort_keys=True,
        default=str,
    )
    return summary_df.select(
        "business_date",
        F.timestamp_millis(F.lit(epoch_ms(now))).alias("run_time"),
        F.lit(ev).cast("long").alias("events_version"),
        F.lit(sv).cast("long").alias("stream_aggregates_version"),
        F.lit(lv).cast("long").alias("late_events_version"),
        F.lit(window_ms).cast("long").alias("window_ms"),
        F.lit(report_timezone).alias("report_timezone"),
        F.lit(settings_json).alias("settings"),
        "windows",
        "stream_count",
        "stream_amount",
        "batch_count",
        "batch_amount",
        "gap_count",
        "gap_amount",
        "late_events",
        "unexplained_windows",
        "unexplained_amount",
        (F.col("unexplained_windows") == 0).alias("balanced"),
    )


def _with_bounds(provenance: DataFrame, progress: DataFrame | None, run: _Run) -> DataFrame:
    """The provenance row with the `stream_progress` version read and, per partition, the
    lateness bounds in force over the micro-batches that carried the date (`batch.bounds`;
    nulls without a stream_progress table)."""
    in_force = bounds_of_day(progress, run.bounds)
    if in_force is None:
        maps = [F.lit(None).cast("map<int,bigint>").alias(c) for c in BOUND_COLUMNS]
        return provenance.select("*", *maps)
    return provenance.crossJoin(in_force)


@dataclass(frozen=True)
class _Run:
    """One run: where it writes, the date (its zone and bounds), the pinned tables read."""

    spark: SparkSession
    warehouse: str
    business_date: date
    report_timezone: str
    bounds: DayBounds
    events: DataFrame
    stream_aggregates: DataFrame
    late_events: DataFrame
    # Frames persisted for the run (`keep`); `reconcile` unpersists them at its end.
    kept: list[DataFrame] = field(default_factory=list)
    # `keep_frames`: what `_run` wrote, for `ReconcileFrames` ("reconciliation" rows, "run" row)
    hand_over: bool = False
    written: dict[str, Any] = field(default_factory=dict)

    def keep(self, df: DataFrame) -> DataFrame:
        """`df` persisted until the run ends: written once, then reused instead of being
        recomputed or read back from the table just written."""
        self.kept.append(df.persist())
        return df

    def release(self) -> None:
        for df in self.kept:
            df.unpersist()
        self.kept.clear()

    def replace(self, df: DataFrame, table: T.Table) -> None:
        _replace_date(df, self.warehouse, table, self.business_date)


def _write_diff(
    run: _Run, batch: DataFrame, stream: DataFrame, late: DataFrame
) -> tuple[DataFrame, int]:
    """Write the date's `reconciliation` rows from the batch side, the stream's answer and the
    late rows (`late_arrivals`); returns them (kept: the summary is computed from them) and
    how many late rows repeat an earlier event. The day's late rows are few: cached, so
    counting the repeats does not read the log again."""
    late = run.keep(late)
    run.written["late"] = late  # for the report's figures (`batch.partitions`)
    diff = run.keep(diff_windows(batch, stream, late_totals(late), run.business_date))
    run.replace(diff, T.RECONCILIATION)
    return diff, late.where(~F.col(FIRST_ARRIVAL)).count()


def _diff_fixed(run: _Run, window_ms: int, slide_ms: int | None) -> tuple[DataFrame, int]:
    """Fixed windows: re-aggregate the date into `batch_aggregates` (persisted while it is
    written, so the diff reuses the dedup instead of reading the table back), then the diff;
    returns the reconciliation rows (persisted) and the late repeats."""
    day, bounds = run.business_date, run.bounds
    stream_rows = run.stream_aggregates.where(window_in_day(bounds))
    # The window check and the diff run without adaptive execution (`without_adaptive_
    # execution`), which made a Spark job of each shuffle stage: the batch side is persisted,
    # the stream side has a row per window, the late rows are few and the log is filtered by
    # a broadcast set of their hashes (a 200k-event day: the diff's write 13 -> 5 jobs).
    # The re-aggregation keeps it: its sides are known only at run time.
    with without_adaptive_execution(run.spark):
        _check_window_size(stream_rows, window_ms, day, slide_ms)
    stream = latest_stream(stream_rows, bounds)
    with without_adaptive_execution(run.spark):  # planned (persisted) and run so
        # the date's late rows, few, are read twice (their ids' hashes, the rows): kept, one
        # scan of `late_events` and one Delta file filtering instead of two; only the
        # columns the diff and the figures read (`LATE_COLUMNS`: not `extra`, a map, nor the
        # watermark, delay and reason columns), narrower to read and to cache
        rows = run.keep(run.late_events.where(window_in_day(bounds)).select(*LATE_COLUMNS))
    copies = _kept_copies(run, rows)
    truth = run.keep(
        batch_aggregates(run.events, day, window_ms, run.report_timezone, slide_ms, copies)
    )
    run.replace(truth, T.BATCH_AGGREGATES)
    with without_adaptive_execution(run.spark):  # the late rows and copies are kept
        late = late_arrivals(rows, copies.lines, bounds)
        return _write_diff(run, truth, stream, late)


def _kept_copies(run: _Run, late_rows: DataFrame) -> Copies:
    """The log's copies the run ranks once (`ranked_hashes` of the log's repeated ids and of
    `late_rows`), kept with the repeated ids: the re-aggregation takes its first arrivals
    from them, the diff its late rows' marks and the figures per partition their repeats,
    so the log is scanned for them once."""
    repeated = run.keep(repeated_ids(run.events))
    copies = Copies(repeated, run.keep(log_copies(run.events, ranked_hashes(repeated, late_rows))))
    run.written["copies"] = copies.lines
    return copies


def _diff_sessions(run: _Run, gap_ms: int) -> tuple[DataFrame, int]:
    """Session windows: the date's sessions into `batch_aggregates`, then the diff per batch
    session (`batch.sessions`); returns the reconciliation rows (persisted) and the late
    repeats."""
    try:
        check_session_width(
            run.stream_aggregates.where(window_in_day(run.bounds)), gap_ms, run.business_date
        )
        reach = stream_reach_ms(latest_stream(run.stream_aggregates, run.bounds), run.bounds)
        reach_row = reach.first()
        sessions, read_end = date_sessions(
            run.events,
            run.bounds,
            gap_ms,
            None if reach_row is None else reach_row["reach"],
            run.business_date,
        )
    except SessionError as exc:
        raise ReconcileError(str(exc)) from None
    truth = session_aggregates(sessions, run.bounds)
    truth = run.keep(truth.select(F.lit(run.business_date).alias("business_date"), *truth.columns))
    try:
        run.replace(truth, T.BATCH_AGGREGATES)
        read = (run.bounds[0], read_end)  # what starts from the date to the end of the read
        stream = stream_per_session(
            latest_stream(run.stream_aggregates, read), sessions, run.bounds
        )
        rows = run.late_events.where(window_in_day(read))
        copies = _kept_copies(run, rows)
        late = late_per_session(late_arrivals(rows, copies.lines, read), sessions, run.bounds)
        return _write_diff(run, truth, stream, late)
    finally:
        sessions.unpersist()


def reconcile(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    window_ms: int,
    report_timezone: str = "UTC",
    events_version: int | None = None,
    stream_versions: Mapping[str, int | None] | None = None,
    *,
    now: datetime,
    settings: Mapping[str, Any] | None = None,
    window_slide_ms: int | None = None,
    session_gap_ms: int = 0,
    keep_frames: bool = False,
) -> ReconcileResult:
    """Re-aggregate `business_date`, diff it against the stream, write the four tables.

    Versions not given are pinned to the latest (read from the Delta history, then read with
    versionAsOf, so the run records exactly what it read). `stream_versions` may hold
    `stream_aggregates` and `late_events`. `now` is the run time recorded in
    `reconciliation_runs` (the entry point passes the wall clock); `settings` (JSON-able)
    is recorded with it. Re-running with the recorded versions reproduces the same rows.
    `window_slide_ms`: hopping windows of `window_ms` sliding by it (None: tumbling).
    `session_gap_ms`: session windows with this gap instead (0: fixed windows; `window_ms`
    is then only recorded). `keep_frames`: the result's `frames` hold what the run read and
    wrote (`ReconcileFrames`; the caller releases them).
    """
    slide_ms = window_slide_ms if window_slide_ms != window_ms else None
    windowing = (window_ms, slide_ms, session_gap_ms)
    stream_versions = dict(stream_versions or {})
    bounds = _checked_bounds(windowing, now, stream_versions, business_date, report_timezone)
    _require_tables(spark, warehouse)
    ev = _pin(spark, warehouse, T.EVENTS.name, events_version)
    sv = _pin(spark, warehouse, "stream_aggregates", stream_versions.get("stream_aggregates"))
    lv = _pin(spark, warehouse, "late_events", stream_versions.get("late_events"))
    pv = None  # a warehouse reconciled without a stream_progress table records no bounds
    if T.exists(spark, warehouse, T.STREAM_PROGRESS.name):
        pv = _pin(spark, warehouse, T.STREAM_PROGRESS.name, stream_versions.get("stream_progress"))
    _ensure_outputs(spark, warehouse)
    run = _Run(
        spark,
        warehouse,
        business_date,
        report_timezone,
        bounds,
        T.read_table(spark, warehouse, T.EVENTS.name, ev),
        T.read_table(spark, warehouse, "stream_aggregates", sv),
        T.read_table(spark, warehouse, "late_events", lv),
        hand_over=keep_frames,
    )

    try:
        result = _run(run, (ev, sv, lv), pv, windowing, now, settings)
        return dataclasses.replace(result, frames=_handed_over(run)) if keep_frames else result
    finally:
        run.release()


def _handed_over(run: _Run) -> ReconcileFrames:
    """The run's `ReconcileFrames`: its reconciliation rows leave `run.kept` (still persisted)
    and become the caller's to release."""
    recon = run.written["reconciliation"]
    if not recon.is_cached:
        recon.persist()
    run.kept[:] = [df for df in run.kept if df is not recon]
    return ReconcileFrames(
        run.events,
        run.stream_aggregates,
        run.late_events,
        run.written["stream_progress"],
        recon,
        run.written["run"],
    )


def _run(
    run: _Run,
    versions: tuple[int, int, int],
    pv: int | None,
    windowing: tuple[int, int | None, int],
    now: datetime,
    settings: Mapping[str, Any] | None,
) -> ReconcileResult:
    """Re-aggregate, diff, summarize and record the run (`reconcile`, once the inputs are
    pinned; `pv`: the pinned stream_progress version, None without that table); `run.kept`
    frames are the caller's to release."""
    business_date, report_timezone = run.business_date, run.report_timezone
    window_ms, slide_ms, session_gap_ms = windowing
    # 1.-2. Re-aggregation and diff.
    if session_gap_ms:
        recon, repeats = _diff_sessions(run, session_gap_ms)
    else:
        recon, repeats = _diff_fixed(run, window_ms, slide_ms)
    # The report's figures per source partition, before the run's row that names them.
    write_partition_figures(
        run.spark,
        run.warehouse,
        business_date,
        run.events,
        run.written["copies"],
        run.written["late"],
        run.bounds,
        now,
    )
    if repeats:
        log.info(
            "%s: %d late side-output row(s) repeat an event_id that arrived earlier (beyond "
            "the stream's dedup horizon); counted neither in the truth nor as late",
            business_date.isoformat(),
            repeats,
        )
    # The summary of the rows just written (kept: not read back from the table), itself kept
    # for its row and the provenance; it and the run's row are small (one row each, from
    # persisted frames): planned without AQE, which made a Spark job of each shuffle stage.
    with without_adaptive_execution(run.spark):
        row = _write_summary_and_run(run, recon, versions, pv, windowing, now, settings)
    ev, sv, lv = versions
    return ReconcileResult(
        business_date,
        ev,
        sv,
        lv,
        window_ms,
        report_timezone,
        row.asDict(),
        repeats,
        slide_ms or None,
        session_gap_ms,
        pv,
    )


def _write_summary_and_run(
    run: _Run,
    recon: DataFrame,
    versions: tuple[int, int, int],
    pv: int | None,
    windowing: tuple[int, int | None, int],
    now: datetime,
    settings: Mapping[str, Any] | None,
) -> Row:
    """Write the date's `reconciliation_summary` row (kept: not read back from the table) and
    its `reconciliation_runs` row (`_provenance`); returns the summary row."""
    business_date, warehouse, report_timezone = (
        run.business_date,
        run.warehouse,
        run.report_timezone,
    )
    run.written["reconciliation"] = recon
    summary_df = run.keep(summarize(recon, business_date))
    _replace_date(summary_df, warehouse, T.RECONCILIATION_SUMMARY, business_date)
    row = summary_df.first()
    assert row is not None

    # 3. Provenance: what was read, with which settings.
    provenance = _provenance(summary_df, versions, windowing, report_timezone, now, settings)
    progress = (
        None if pv is None else T.read_table(run.spark, warehouse, T.STREAM_PROGRESS.name, pv)
    )
    provenance = _with_bounds(provenance, progress, run).select(
        "*", F.lit(pv).cast("long").alias("stream_progress_version")
    )
    if run.hand_over:  # the row as the table holds it, kept while written, for the caller
        provenance = run.keep(T.conform(provenance, T.RECONCILIATION_RUNS))
    _replace_date(provenance, warehouse, T.RECONCILIATION_RUNS, business_date)
    if run.hand_over:
        written = provenance.first()
        assert written is not None
        run.written.update(run=written.asDict(), stream_progress=progress)
    return row


def recorded_run(spark: SparkSession, warehouse: str, business_date: date) -> dict[str, Any] | None:
    """The `reconciliation_runs` row of the date, or None if it was never reconciled."""
    if not T.exists(spark, warehouse, T.RECONCILIATION_RUNS.name):
        return None
    row = _read_date(spark, warehouse, T.RECONCILIATION_RUNS, business_date).first()
    return row.asDict() if row is not None else None


def reproduce(
    spark: SparkSession, warehouse: str, business_date: date, *, now: datetime
) -> ReconcileResult:
    """Re-run the date at the versions, windowing and zone its last run recorded."""
    run = recorded_run(spark, warehouse, business_date)
    if run is None:
        raise ReconcileError(f"date: {business_date.isoformat()} was never reconciled")
    recorded = json.loads(run["settings"])
    return reconcile(
        spark,
        warehouse,
        business_date,
        int(run["window_ms"]),
        str(run["report_timezone"]),
        events_version=int(run["events_version"]),
        stream_versions={
            "stream_aggregates": int(run["stream_aggregates_version"]),
            "late_events": int(run["late_events_version"]),
            # absent before the bounds in force were recorded: the latest
            "stream_progress": run.get("stream_progress_version"),
        },
        now=now,
        settings=recorded,
        window_slide_ms=recorded.get("window_slide_ms"),  # absent before hopping windows
        session_gap_ms=int(recorded.get("session_gap_ms") or 0),  # absent: fixed windows
    )
