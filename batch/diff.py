"""The diff of a business date, as DataFrame -> DataFrame transforms (no reads, no writes).

The run (`batch.reconcile`) pins the inputs, chains these and writes what they return:

1. **Copies and first arrivals.** An event counts once, by its first arrival in the log
   (`tally.arrivals`; arrival order = `ingest_time`, `batch_id`, `source_mtime`,
   `source_file`, `source_line`). Only the copies of repeated ids are ranked (`repeated_ids`,
   `ranked_hashes`, `log_copies`); `day_events` takes the date's first arrivals, windowed
   with the shared `tally.windows` code, and `batch_aggregates` aggregates them.
2. **The stream's answer** per window and key: its highest final revision (`latest_stream`).
3. **The late totals** (`late_arrivals`, `late_totals`): a late row counts only if it is the
   first arrival of its `event_id` in the pinned log, each `event_id` once: a repeat the
   stream no longer recognized (beyond its dedup horizon) lands in `late_events`, but the
   batch does not count it, so neither do the late totals.
4. **The diff** (`diff_windows`): per `(window_start, window_end, key)`, batch vs stream vs
   late, with a status (`status_column`); `summarize` gives the day's totals.

Business date of a window: the date, in the report's time zone, on which its `window_start`
falls. A window that straddles midnight therefore belongs to the *earlier* date, together
with all its events, including those timed after midnight.

Statuses (all arithmetic is exact BIGINT; a side without a row counts as 0):

* `MATCH`: the stream has the window, stream == batch (count and amount), no late events and
  no copies.
* `EXPLAINED_BY_LATE`: the stream has the window and batch − stream == late totals (count and
  amount) exactly, with at least one late event and no copies.
* `EXPLAINED_BY_COPIES`: the stream has the window and batch − stream == late − copies
  exactly, with at least one copy: a line the stream counted that is not its event_id's
  first arrival (`counted_copies`: beyond its dedup horizon the stream counts a reused id
  again when its window can still change), late events or not.
* `MISSING_IN_STREAM`: the stream has no row for the window and batch == late totals exactly
  (the whole window arrived late), with at least one late event.
* `UNEXPLAINED`: anything else. Exactly these rows have a nonzero residual
  (`residual = (batch − stream) − late + copies`), shown in `residual_count` /
  `residual_amount`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from batch.partitions import FIGURE_COLUMNS
from tally.arrivals import (
    FIRST_ARRIVAL,
    FIRST_COPY,
    LINE_IDENTITY,
    WINDOW_BOUNDS,
    explaining_late,
    first_lines,
    marked_copies,
    marked_first,
)
from tally.dates import (
    DayBounds,
    business_day_bounds,
    utc_dates_touching,
    window_event_times,
    window_in_day,
)
from tally.money import DEFAULT_CURRENCY
from tally.tables import zero_if_absent
from tally.tolerance_columns import RULE_COLUMN, SEVERITY_COLUMN, date_verdicts
from tally.tolerances import NO_RULE, OK, ToleranceRule
from tally.vocabulary import (
    ARRIVAL_ORDER,
    COUNTED,
    EXPLAINED_BY_COPIES,
    EXPLAINED_BY_LATE,
    LATE_ARRIVAL_ORDER,
    MATCH,
    MISSING_IN_STREAM,
    UNEXPLAINED,
)
from tally.windows import WINDOW_KEY, aggregate_windows, with_windows

WORST_KEYS = 5

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


ID_HASH = "_id_hash"
# `late_arrivals`: a late row whose id is ranked among the run's copies.
_RANKED = "_ranked"


def id_hash(event_id: Column | str = "event_id") -> Column:
    """A 64-bit hash of `event_id`: ids are counted and probed by it (8 bytes a row on the
    shuffle or in the index, `batch.firsts`, instead of the id). Distinct ids that share a
    hash only take the exact path together."""
    return F.xxhash64(event_id)


def repeated_ids(events: DataFrame) -> DataFrame:
    """`ID_HASH` of every event_id with more than one copy in the log (and of distinct ids
    that share a hash): one column, one row per hash, small (duplicates are few)."""
    return repeated_of(events.select(id_hash().alias(ID_HASH)).transform(with_copy_counts))


# `with_copy_counts`: how many rows of the frame share the row's `ID_HASH`.
COPY_COUNT = "_copies"


def with_copy_counts(hashes: DataFrame) -> DataFrame:
    """`hashes` (one row per line, with `ID_HASH`) with `COPY_COUNT`: the lines that share the
    row's hash. A count over a window (one shuffle of the hashes, then a sort), not a grouped
    count: the ids of a log are nearly all distinct, so a hash aggregate's map-side step only
    costs (20M hashes on 2 cores: 21.8 s grouped, 10.9 s windowed)."""
    per_hash = Window.partitionBy(ID_HASH)
    return hashes.select("*", F.count(F.lit(1)).over(per_hash).alias(COPY_COUNT))


def repeated_of(counted: DataFrame) -> DataFrame:
    """The hashes of `with_copy_counts` that more than one line shares: one row each."""
    return counted.where(F.col(COPY_COUNT) > 1).select(ID_HASH).distinct()


def ranked_hashes(repeated: DataFrame) -> DataFrame:
    """`ID_HASH` of the event_ids whose lines a run ranks (`log_copies`): the `repeated` ones
    (`repeated_ids` of the log) and a null id (the figures per partition count a late line
    without an id as a repeat). Small. A late row of any other id is its id's only line in
    the log, if the pinned log holds it at all (`late_arrivals`): it needs no ranking."""
    no_id = repeated.sparkSession.range(1).select(
        id_hash(F.lit(None).cast("string")).alias(ID_HASH)
    )
    return repeated.unionByName(no_id)


# The columns of the log's copies a run keeps (`log_copies`): what `day_events` reads, the
# lines `late_arrivals` compares and what the figures per partition count.
COPY_COLUMNS = tuple(
    dict.fromkeys(
        (
            "event_id",
            "key",
            "currency",
            "amount",
            "event_time",
            "arrival_status",
            *ARRIVAL_ORDER,
            *LINE_IDENTITY,
            *FIGURE_COLUMNS,
        )
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
    columns: Sequence[str] = (),
) -> DataFrame:
    """Deduplicated events (first arrival wins) whose window belongs to the business date,
    with `window_start`/`window_end`: one row per (event, window of the date), S/H windows
    per event when they hop (`slide_ms`; None: tumbling). `copies`: the log's copies ranked
    in `order`, if the caller has them (None: those of `repeated_ids(events)`); `columns`:
    more of the log's columns to keep (among `COPY_COLUMNS` when `copies` are given).

    Equivalent to deduplicating the whole log and then filtering, without moving the wide
    rows: an id with one copy is its own first arrival, so only the copies of the repeated
    ids (a broadcast set of hashes, a few per cent of the log) are ranked by the window
    function; the single copies stream through from the date's partitions (a single copy
    can only belong to the day if it is in them).
    """
    bounds = business_day_bounds(business_date, report_timezone)
    first, last = utc_dates_touching(bounds, window_ms)
    needed = list(
        dict.fromkeys(["event_id", "key", "currency", "amount", "event_time", *order, *columns])
    )
    if copies is None:
        repeated = repeated_ids(events)
        lines = log_copies(events, repeated, order, list(dict.fromkeys((*needed, *LINE_IDENTITY))))
        copies = Copies(repeated, lines)
    repeated = F.broadcast(copies.repeated)
    # only lines timed where one of their windows can start in the day: the rest can only be
    # copies (ranked among `copies`); Delta skips the files of the dates around the day
    start_ms, end_ms = window_event_times(bounds, window_ms)
    timed = (F.col("event_time") >= F.timestamp_millis(F.lit(start_ms))) & (
        F.col("event_time") < F.timestamp_millis(F.lit(end_ms))
    )
    singles = (
        events.where(F.col("event_date").between(F.lit(first), F.lit(last)) & timed)
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
    return latest_final_rows(stream_aggregates, bounds).select(
        *WINDOW_KEY, "event_count", "amount_sum"
    )


def latest_final_rows(stream_aggregates: DataFrame, bounds: DayBounds) -> DataFrame:
    """`latest_stream`'s rows with all their columns (which micro-batch emitted each answer)."""
    rank = F.row_number().over(
        Window.partitionBy(*WINDOW_KEY).orderBy(
            F.col("revision").desc(), F.col("emit_time").desc(), F.col("batch_id").desc()
        )
    )
    return (
        final_rows(stream_aggregates.where(window_in_day(bounds)))
        .withColumn("_rank", rank)
        .where("_rank = 1")
        .drop("_rank")
        .transform(not_retracted)
    )


def late_arrivals(
    late_events: DataFrame, copies: Copies, bounds: DayBounds, in_log: Column
) -> DataFrame:
    """The late side-output rows of the day's windows, each with `first_arrival`: whether it is
    the first arrival of its event_id in the (pinned) event log. A row that is not is a repeat
    the stream no longer recognized (beyond its dedup horizon): the batch does not count it.

    `copies`: the log's repeated ids and their lines, ranked (`log_copies` of
    `ranked_hashes`): the log is not read again. A row of a repeated id is marked from its
    id's first line; a row of any other id has no other line in the pinned log, so it is a
    first arrival exactly when its own line is there: `in_log`, the pin's batch frontier of
    `events` (`tally.pins.within`: the stream appends a batch's lines, late ones included,
    to `events` with the batch's app_id and batch_id, which its late rows carry). Ids of
    null are never first arrivals, as in `tally.arrivals.with_first_arrival`. So only the
    few rows of repeated ids are joined (those 1.4M late rows of a 20M-event day with 6 %
    late were all ranked and joined before)."""
    rows = late_events.where(window_in_day(bounds))
    ranked = F.broadcast(copies.repeated.select(ID_HASH, F.lit(True).alias(_RANKED)))
    flagged = rows.withColumn(ID_HASH, id_hash()).join(ranked, ID_HASH, "left")
    of_repeated = flagged.where(F.col(_RANKED).isNotNull()).select(*rows.columns)
    single = flagged.where(F.col(_RANKED).isNull()).select(
        *rows.columns, (F.col("event_id").isNotNull() & in_log).alias(FIRST_ARRIVAL)
    )
    return marked_first(of_repeated, first_lines(copies.lines)).unionByName(single)


# The columns of the explaining late rows the diff and the figures per partition read
# (`explaining_rows`).
EXPLAINING_COLUMNS = (*WINDOW_KEY, "amount", "lateness_ms", "partition")


def explaining_rows(late: DataFrame) -> DataFrame:
    """The late rows that explain a gap (`tally.arrivals.explaining_late` of `late_arrivals`:
    first arrivals, each event_id once per window), with only what `late_totals` and the
    figures per partition read: one ranking of the late rows for both."""
    return explaining_late(late).select(*EXPLAINING_COLUMNS)


def late_totals(explaining: DataFrame) -> DataFrame:
    """Late side output totals per window and key, with the largest lateness, from
    `explaining_rows`: only rows that are first arrivals explain a gap, each event_id once (so
    a repeated write could not inflate the explanation either). The count and sum are
    `aggregate_windows`' expressions; the windows are the ones the stream recorded."""
    return explaining.groupBy(*WINDOW_KEY).agg(
        F.count(F.lit(1)).alias("event_count"),
        F.sum("amount").cast("long").alias("amount_sum"),
        F.max("lateness_ms").cast("long").alias("max_lateness"),
    )


# The columns of a copy the stream counted (`counted_copies`) that the evidence keeps.
COUNTED_COPY_COLUMNS = tuple(
    dict.fromkeys(
        (
            *WINDOW_KEY,
            "event_id",
            "amount",
            "event_time",
            "arrival_status",
            *ARRIVAL_ORDER,
            *LINE_IDENTITY,
        )
    )
)


def counted_copies(
    copies: Copies,
    late: DataFrame,
    bounds: DayBounds,
    window_ms: int,
    slide_ms: int | None = None,
) -> DataFrame:
    """The copies of earlier events that the stream counted into the day's windows: one row per
    (line, window). A line of `copies` (ranked: `FIRST_ARRIVAL`) that is not its event_id's
    first arrival and that the stream counted (`arrival_status` on_time or allowed_late: not
    a duplicate, not late in every window) was a repeat of an id beyond its dedup horizon,
    classified like a new event (docs/semantics.md): counted into each of its windows except
    those it has a `late_events` row for (`late`: `late_arrivals`; a hopping event can be
    counted in some windows and late for others). The batch counts the id once, by its first
    arrival, so each such row is one event of stream surplus."""
    lines = copies.lines.where(
        ~F.col(FIRST_ARRIVAL)
        & F.col("event_id").isNotNull()
        & F.col("arrival_status").isin(*COUNTED)
    ).select(*[c for c in COUNTED_COPY_COLUMNS if c not in WINDOW_BOUNDS])
    windowed = with_windows(lines, window_ms, slide_ms).where(window_in_day(bounds))
    late_lines = late.where(~F.col(FIRST_ARRIVAL)).select(
        *[F.col(c).alias(f"_late_{c}") for c in (*LINE_IDENTITY, *WINDOW_BOUNDS)]
    )
    same = reduce(
        lambda a, b: a & b,
        [F.col(c).eqNullSafe(F.col(f"_late_{c}")) for c in (*LINE_IDENTITY, *WINDOW_BOUNDS)],
    )
    return windowed.join(late_lines, same, "left_anti").select(*COUNTED_COPY_COLUMNS)


def copy_evidence(counted: DataFrame, copies: Copies, business_date: date) -> DataFrame:
    """`reconciliation_copies` rows (without run_time): each copy the stream counted
    (`counted_copies`) beside its event_id's first arrival in `copies`."""
    first = copies.lines.where(F.col(FIRST_COPY) & F.col("event_id").isNotNull()).select(
        F.col("event_id").alias("_first_id"),
        F.col("event_date").alias("first_event_date"),
        F.col("event_time").alias("first_event_time"),
        F.col("key").alias("first_key"),
        F.col("amount").alias("first_amount"),
        F.col("currency").alias("first_currency"),
        F.col("ingest_time").alias("first_ingest_time"),
        F.col("source_file").alias("first_source_file"),
        F.col("source_line").alias("first_source_line"),
    )
    joined = counted.join(first, F.col("event_id") == F.col("_first_id"), "left")
    return joined.select(
        F.lit(business_date).alias("business_date"),
        *[c for c in counted.columns if c != "source_mtime"],
        *[c for c in first.columns if c != "_first_id"],
    )


def copy_totals(counted: DataFrame) -> DataFrame:
    """Per window and key: how many copies the stream counted (`counted_copies`), and their
    amount: `aggregate_windows`' expressions."""
    return counted.groupBy(*WINDOW_KEY).agg(
        F.count(F.lit(1)).alias("event_count"),
        F.sum("amount").cast("long").alias("amount_sum"),
    )


def status_column(
    in_stream: Column,
    stream: tuple[Column, Column],
    batch: tuple[Column, Column],
    late: tuple[Column, Column],
    copies: tuple[Column, Column],
) -> Column:
    """The status of a window from its (count, amount) pairs; all non-null BIGINT. The gap
    (batch − stream) is explained when it equals late − copies exactly."""
    (s_count, s_amount), (b_count, b_amount), (l_count, l_amount) = stream, batch, late
    c_count, c_amount = copies
    no_late = (l_count == 0) & (l_amount == 0)
    no_copies = (c_count == 0) & (c_amount == 0)
    explained = ((b_count - s_count) == (l_count - c_count)) & (
        (b_amount - s_amount) == (l_amount - c_amount)
    )
    batch_is_late = (b_count == l_count) & (b_amount == l_amount)
    return (
        F.when(
            in_stream & (s_count == b_count) & (s_amount == b_amount) & no_late & no_copies,
            F.lit(MATCH),
        )
        .when(in_stream & explained & ~no_late & no_copies, F.lit(EXPLAINED_BY_LATE))
        .when(in_stream & explained & ~no_copies, F.lit(EXPLAINED_BY_COPIES))
        .when(~in_stream & batch_is_late & ~no_late & no_copies, F.lit(MISSING_IN_STREAM))
        .otherwise(F.lit(UNEXPLAINED))
    )


def diff_windows(
    batch: DataFrame,
    stream: DataFrame,
    late: DataFrame,
    business_date: date,
    copies: DataFrame | None = None,
) -> DataFrame:
    """Rows of `reconciliation`: batch (WINDOW_KEY, event_count, amount_sum) vs the stream's
    latest revision vs late totals (`late_totals`) and the copies the stream counted
    (`copy_totals`; None: none), full outer, exact BIGINT arithmetic.

    Each side has at most one row per window and key, so the full outer join of the sides is
    their union grouped by WINDOW_KEY: one shuffle and a hash aggregate instead of sort-
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
    if copies is not None:
        sides.append(
            copies.select(
                *WINDOW_KEY,
                F.col("event_count").alias("_c_count"),
                F.col("amount_sum").alias("_c_amount"),
            )
        )
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), sides)
    side_columns = [c for side in sides for c in side.columns if c not in WINDOW_KEY]
    joined = union.groupBy(*WINDOW_KEY).agg(*[F.max(c).alias(c) for c in side_columns])

    def zero(name: str) -> Column:
        return F.coalesce(F.col(name), F.lit(0)).cast("long")

    stream_pair = (zero("_s_count"), zero("_s_amount"))
    batch_pair = (zero("_b_count"), zero("_b_amount"))
    late_pair = (zero("_l_count"), zero("_l_amount"))
    if copies is not None:
        copies_pair = (zero("_c_count"), zero("_c_amount"))
    else:
        copies_pair = (F.lit(0).cast("long"), F.lit(0).cast("long"))
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
        (diff_count - late_pair[0] + copies_pair[0]).alias("residual_count"),
        (diff_amount - late_pair[1] + copies_pair[1]).alias("residual_amount"),
        F.col("max_lateness_ms").cast("long").alias("max_lateness_ms"),
        status_column(in_stream, stream_pair, batch_pair, late_pair, copies_pair).alias("status"),
        copies_pair[0].alias("copies_count"),
        copies_pair[1].alias("copies_amount"),
    )


def summarize(
    reconciliation: DataFrame,
    business_date: date,
    rules: Sequence[ToleranceRule] = (),
    currency: str = DEFAULT_CURRENCY,
) -> DataFrame:
    """The `reconciliation_summary` rows of the date: one per currency of its rows (amounts of
    two currencies are never added), and one in `currency` (the run's) when it has none.

    gap = batch − stream; explained = the late side output totals of the date's windows less
    the copies the stream counted (`copies_*`); unexplained = the sum of residuals (signed;
    nonzero only on UNEXPLAINED rows), so gap = explained + unexplained exactly;
    `unexplained_abs_amount` = sum of |residual_amount| (residuals of opposite sign cannot
    hide each other there); `unexplained_windows` = number of UNEXPLAINED rows. worst_keys:
    up to 5 keys with a nonzero residual or diff, by sum |residual_amount| desc, then
    sum |diff_amount| desc, then key. `severity` and `tolerance_rule`: the (date, currency)'s
    severity under the materiality tolerance `rules` (`date_verdicts`: the worse of its sums
    and its worst window) from the graded rows (`with_window_verdicts`).
    """
    r = reconciliation
    figures = _summary_figures()
    per_currency = r.groupBy("currency").agg(*figures)
    # a date without windows: one row of zeros (a global aggregate of no rows) in `currency`
    none = (
        r.agg(*figures)
        .where(F.col("windows") == 0)
        .select(
            F.lit(currency).alias("currency"), *[c for c in per_currency.columns if c != "currency"]
        )
    )
    totals = per_currency.unionByName(none)
    rate = F.when(
        F.col("batch_count") > 0, F.col("late_events").cast("double") / F.col("batch_count")
    )
    verdicts = date_verdicts(r, rules, by=["currency"])
    return (
        # a row a currency each side: broadcast, never a shuffled join
        totals.join(F.broadcast(_worst_keys(r)), "currency", "left")
        .join(F.broadcast(verdicts), "currency", "left")
        .select(
            F.lit(business_date).alias("business_date"),
            *[c for c in totals.columns if c != "currency"],
            rate.alias("late_event_rate"),
            F.coalesce(F.col("worst_keys"), F.array().cast("array<string>")).alias("worst_keys"),
            F.coalesce(SEVERITY_COLUMN, F.lit(OK)).alias(SEVERITY_COLUMN),
            F.coalesce(RULE_COLUMN, F.lit(NO_RULE)).alias(RULE_COLUMN),
            "currency",
        )
    )


def _summary_figures() -> list[Column]:
    """The summary's figures as aggregates over `reconciliation` rows (of one currency)."""

    def total(name: str) -> Column:
        return F.coalesce(F.sum(name), F.lit(0)).cast("long")

    def windows_with(status: str) -> Column:
        return F.count_if(F.col("status") == status).cast("long")

    return [
        F.count(F.lit(1)).cast("long").alias("windows"),
        total("stream_count").alias("stream_count"),
        total("stream_amount").alias("stream_amount"),
        total("batch_count").alias("batch_count"),
        total("batch_amount").alias("batch_amount"),
        total("diff_count").alias("gap_count"),
        total("diff_amount").alias("gap_amount"),
        (total("late_count") - total("copies_count")).alias("explained_count"),
        (total("late_amount") - total("copies_amount")).alias("explained_amount"),
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
        total("copies_count").alias("copies_count"),
        total("copies_amount").alias("copies_amount"),
        windows_with(EXPLAINED_BY_COPIES).alias("explained_by_copies_windows"),
    ]


def _worst_keys(reconciliation: DataFrame) -> DataFrame:
    """Per currency, `worst_keys`: up to WORST_KEYS keys with a nonzero residual or diff, by
    sum |residual_amount| desc, then sum |diff_amount| desc, then key."""
    per_key = reconciliation.groupBy("currency", "key").agg(
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
    return (
        per_key.where(off)
        .groupBy("currency")
        .agg(ranked.alias("ranked"))
        .select("currency", F.slice(F.col("ranked.k"), 1, WORST_KEYS).alias("worst_keys"))
    )


# The columns of a `reconciliation` row a reproduction compares (all but the date, the window
# and key it is joined on, and the run_time of the run that wrote it).
COMPARED_COLUMNS = (
    "stream_count",
    "stream_amount",
    "batch_count",
    "batch_amount",
    "diff_count",
    "diff_amount",
    "late_count",
    "late_amount",
    "residual_count",
    "residual_amount",
    "max_lateness_ms",
    "status",
    "copies_count",
    "copies_amount",
)


def window_differences(recomputed: DataFrame, recorded: DataFrame) -> DataFrame:
    """The windows whose `reconciliation` rows differ between two computations of a date: one
    row per window and key with `recorded` and `recomputed` (structs of `COMPARED_COLUMNS`;
    null where that side has no row). Empty when they are the same rows."""

    def side(rows: DataFrame, name: str) -> DataFrame:
        # a row from before copies were counted has none (null): it counted none
        columns = [
            zero_if_absent(rows, c).alias(c) if c.startswith("copies_") else c
            for c in COMPARED_COLUMNS
        ]
        return rows.select(*WINDOW_KEY, F.struct(*columns).alias(name))

    joined = side(recomputed, "recomputed").join(
        side(recorded, "recorded"), list(WINDOW_KEY), "full_outer"
    )
    return joined.where(~F.col("recomputed").eqNullSafe(F.col("recorded")))
