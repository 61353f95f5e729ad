"""The first-arrival rule, shared by the batch layer and the report: an `event_id` is counted
once, by its first arrival in the event log (arrival order: `tally.vocabulary.ARRIVAL_ORDER`).

The stream deduplicates only within its dedup horizon (docs/semantics.md): a repeat of an id
it has forgotten is classified like a new event, normally `late`, and also lands in the late
side output. Such a row is not a first arrival: it explains no gap, because the batch truth
(first arrivals) does not count it either. `with_first_arrival` tells the two apart by the
line that produced a row (`LINE_IDENTITY`), so a row written twice for one line (which no
exactly-once stream does) is still seen as twice the same line, never hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from tally.dates import DayBounds, from_epoch_ms, in_day
from tally.vocabulary import ARRIVAL_ORDER, DUPLICATE, LATE_ARRIVAL_ORDER

# The input line a row of `events` or `late_events` came from (and its event_id).
LINE_IDENTITY = ("event_id", "app_id", "batch_id", "source_file", "source_line")
FIRST_ARRIVAL = "first_arrival"
# `marked_copies`: the one line of an event_id that `first_arrivals` keeps.
FIRST_COPY = "_first_copy"
WINDOW_BOUNDS = ("window_start", "window_end")


def first_arrivals(
    events: DataFrame, order: Sequence[str] = ARRIVAL_ORDER, per: Sequence[str] = ("event_id",)
) -> DataFrame:
    """One row per `per` (an `event_id` by default): its first arrival in `order` (a window
    function, in the JVM)."""
    rank = F.row_number().over(Window.partitionBy(*per).orderBy(*order))
    return events.withColumn("_arrival_rank", rank).where("_arrival_rank = 1").drop("_arrival_rank")


# A log line's identity and its arrival order: what ranking copies reads.
_ARRIVAL_LINE = list(dict.fromkeys((*LINE_IDENTITY, *ARRIVAL_ORDER)))


def with_first_arrival(rows: DataFrame, events: DataFrame) -> DataFrame:
    """`rows` (with the `LINE_IDENTITY` columns) plus a BOOLEAN `first_arrival`: whether the
    row's line is the first arrival of its `event_id` in the event log `events`.

    Only the copies of the ids in `rows` are ranked (a semi-join on the log), so the cost is
    one scan of the log's arrival columns plus a sort of those few copies.
    """
    copies = events.select(*_ARRIVAL_LINE).join(
        rows.select("event_id").distinct(), "event_id", "left_semi"
    )
    return marked_first(rows, first_lines(marked_copies(copies)))


def _same_line(first: Callable[[str], Column]) -> Column:
    """Whether a row's `LINE_IDENTITY` columns equal (null-safe) those `first` names."""
    return reduce(lambda a, b: a & b, [F.col(c).eqNullSafe(first(c)) for c in LINE_IDENTITY])


def marked_copies(copies: DataFrame, order: Sequence[str] = ARRIVAL_ORDER) -> DataFrame:
    """`copies` (every line of the log of some event_ids, with the `LINE_IDENTITY` and `order`
    columns) plus two BOOLEANs, from one window over them: `FIRST_COPY`, the one line per
    event_id that `first_arrivals` keeps, and `FIRST_ARRIVAL`, whether the line is its
    event_id's first arrival as `with_first_arrival` marks a row (its line is the first
    line: a line written twice is so both times; a null event_id never is)."""
    spec = Window.partitionBy("event_id").orderBy(*order)
    first_line = F.first(F.struct(*LINE_IDENTITY)).over(
        spec.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    same_line = _same_line(lambda c: first_line[c])
    return copies.select(
        "*",
        (F.row_number().over(spec) == 1).alias(FIRST_COPY),
        (F.col("event_id").isNotNull() & same_line).alias(FIRST_ARRIVAL),
    )


def first_lines(marked: DataFrame) -> DataFrame:
    """The `first` of `marked_first` from `marked_copies` output: one row per event_id (not
    null) with its first arrival's line as `_first_<column>`."""
    firsts = marked.where(F.col(FIRST_COPY) & F.col("event_id").isNotNull())
    return firsts.select(*[F.col(c).alias(f"_first_{c}") for c in LINE_IDENTITY])


def marked_first(rows: DataFrame, first: DataFrame) -> DataFrame:
    """`rows` plus `first_arrival`, given `first`: one row per event_id (not null) with the
    line of its first arrival as `_first_<column>` for each `LINE_IDENTITY` column."""
    same_line = _same_line(lambda c: F.col(f"_first_{c}"))
    return rows.join(first, same_line, "left").select(
        *rows.columns,
        F.col("_first_event_id").isNotNull().alias(FIRST_ARRIVAL),
    )


def explaining_late(late: DataFrame) -> DataFrame:
    """The late side-output rows that explain a gap between batch and stream: of `late` (rows
    of `late_events` with `first_arrival`, see `with_first_arrival`), those that are the first
    arrival of their event_id, each (event_id, window) once: a hopping event can be late for
    several of its windows, one row each."""
    firsts = late.where(F.col(FIRST_ARRIVAL)).drop(FIRST_ARRIVAL)
    return first_arrivals(firsts, LATE_ARRIVAL_ORDER, per=("event_id", *WINDOW_BOUNDS))


def event_of_day(bounds: DayBounds) -> Column:
    """A row of the event log that counts as an event of the date for the per-partition
    figures (the report's partition table, `reconciliation_partitions`): its `event_time` is
    in the day (read from the `event_date` partitions the day touches) and it is not a
    `duplicate`. Null (an `arrival_status` of null) is no: wrap it in `coalesce(.., false)`."""
    return (
        partitions_of_day(bounds)
        & in_day(bounds, "event_time")
        & (F.col("arrival_status") != DUPLICATE)
    )


def partitions_of_day(bounds: DayBounds) -> Column:
    """The `event_date` partitions a day's events lie in. A filter `coalesce(event_of_day, ..)`
    is one expression over data columns, which Spark cannot prune partitions by: put this
    beside it as its own conjunct, or the scan reads the whole log."""
    first_day = from_epoch_ms(bounds[0]).date()
    last_day = from_epoch_ms(bounds[1]).date()
    return F.col("event_date").between(F.lit(first_day), F.lit(last_day))
