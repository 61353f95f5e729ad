"""Session windows in the nightly (docs/semantics.md, "Session windows", "In the nightly").

The truth of a business date is the sessions of the first arrivals (`tally.windows`'
`aggregate_sessions`, the stream's own merge) that start on the date. Event times are read
from `D` before the date (an event earlier than that cannot reach into it) to `D` after it,
widened a day at a time while a session of the date reaches the end of what was read
(`read_range`, `reaching_past`).

The diff is per batch session `B`: the stream's current final sessions and the explaining
late rows are moved onto the batch session holding them (`onto_batch_sessions`), then
aggregated per `(window_start, window_end, key)` like fixed windows. A row held by no batch
session keeps its own bounds (an UNEXPLAINED row, batch 0) when it starts on the date; a row
held by a session of another date, or starting on another date, is that date's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from tally.arrivals import first_arrivals
from tally.dates import DayBounds, in_day, iso_ms, utc_dates_touching, window_in_day
from tally.vocabulary import ARRIVAL_ORDER
from tally.windows import SESSION_OWNER, WINDOW_KEY, aggregate_sessions

DAY_MS = 86_400_000
MAX_WIDENING_DAYS = 31


class SessionError(RuntimeError):
    """The date's sessions cannot be reconciled (one line)."""


def read_range(bounds: DayBounds, gap_ms: int, extra_days: int = 0) -> DayBounds:
    """The event times read for the date's sessions: `[start − D, end + D)`, the end widened
    by `extra_days` days."""
    start, end = bounds
    return start - gap_ms, end + gap_ms + extra_days * DAY_MS


def _ts(ms: int) -> Column:
    return F.timestamp_millis(F.lit(ms))


def first_arrivals_in(
    events: DataFrame,
    read: DayBounds,
    order: Sequence[str] = ARRIVAL_ORDER,
    columns: Sequence[str] = (),
) -> DataFrame:
    """The first arrival of each event_id (`tally.arrivals.first_arrivals`) whose event time
    is in `read` (`columns`: more of the log's columns to keep). As in `day_events`, only the
    ids with a copy in the range's `event_date` partitions are ranked: an id's first copy can
    only be in range if one of its copies is."""
    first_day, last_day = utc_dates_touching(read, 0)
    in_range = in_day(read, "event_time")
    candidates = events.where(
        F.col("event_date").between(F.lit(first_day), F.lit(last_day)) & in_range
    ).select("event_id")
    needed = list(
        dict.fromkeys(["event_id", "key", "currency", "amount", "event_time", *order, *columns])
    )
    copies = events.select(*needed).join(candidates, "event_id", "left_semi")
    return first_arrivals(copies, order).where(in_range)


def sessions_read(events: DataFrame, bounds: DayBounds, read: DayBounds, gap_ms: int) -> DataFrame:
    """Sessions (WINDOW_KEY, event_count, amount_sum) of the first arrivals timed in `read`
    that reach into the date (a session ending before it can hold nothing of it)."""
    sessions = aggregate_sessions(first_arrivals_in(events, read), gap_ms)
    return sessions.where(F.col("window_end") > _ts(bounds[0]))


def reaching_past(sessions: DataFrame, bounds: DayBounds, read_end_ms: int) -> DataFrame:
    """One row, `n`: how many sessions of the date end past `read_end_ms` (an event at or
    after it might extend them: read further)."""
    beyond = window_in_day(bounds) & (F.col("window_end") > _ts(read_end_ms))
    return sessions.agg(F.count_if(beyond).alias("n"))


def session_aggregates(sessions: DataFrame, bounds: DayBounds) -> DataFrame:
    """The sessions that start on the date: `batch_aggregates` rows without the date."""
    return sessions.where(window_in_day(bounds)).select(*WINDOW_KEY, "event_count", "amount_sum")


def narrower_than(stream_rows: DataFrame, gap_ms: int) -> DataFrame:
    """Stream rows narrower than the gap (`ms`, `start` in epoch ms): none in a session
    stream, whose every session spans at least one gap."""
    width = F.unix_millis("window_end") - F.unix_millis("window_start")
    return stream_rows.where(width < F.lit(gap_ms)).select(
        width.alias("ms"), F.unix_millis("window_start").alias("start")
    )


def stream_reach_ms(current: DataFrame, bounds: DayBounds) -> DataFrame:
    """One row, `reach`: the latest end (epoch ms) of the stream's current sessions that
    start on the date (null without any)."""
    return current.where(window_in_day(bounds)).agg(
        F.max(F.unix_millis("window_end")).alias("reach")
    )


def check_session_width(stream_rows: DataFrame, gap_ms: int, business_date: date) -> None:
    """Every stream row of the date is at least one gap wide, as every session is (a
    fixed-window stream reconciled as sessions, or another gap, fails here)."""
    narrow = narrower_than(stream_rows, gap_ms).first()
    if narrow is not None:
        raise SessionError(
            f"session_gap: stream_aggregates holds a {narrow['ms']} ms window starting at "
            f"{narrow['start']} ms on {business_date.isoformat()}, narrower than the "
            f"{gap_ms} ms gap (fixed windows, or another gap?)"
        )


def days_to_reach(bounds: DayBounds, gap_ms: int, reach_ms: int | None) -> int:
    """Days the read must be widened by so that it covers `reach_ms` (the end of the stream's
    latest session of the date; at most MAX_WIDENING_DAYS: a longer one stays unexplained)."""
    if reach_ms is None:
        return 0
    short = reach_ms - read_range(bounds, gap_ms)[1]
    return min(max(0, -(-short // DAY_MS)), MAX_WIDENING_DAYS)


def date_sessions(
    events: DataFrame, bounds: DayBounds, gap_ms: int, reach_ms: int | None, business_date: date
) -> tuple[DataFrame, int]:
    """The sessions read for the date (persisted: the caller unpersists) and the end of the
    event times read, widened a day at a time while a session of the date, in the batch or
    the stream (`reach_ms`), reaches past it. Each step is decided by a one-row aggregate."""
    days = days_to_reach(bounds, gap_ms, reach_ms)
    while True:
        read = read_range(bounds, gap_ms, days)
        sessions = sessions_read(events, bounds, read, gap_ms).persist()
        beyond = reaching_past(sessions, bounds, read[1]).first()
        if beyond is None or not beyond["n"]:
            return sessions, read[1]
        sessions.unpersist()
        if days >= MAX_WIDENING_DAYS:
            raise SessionError(
                f"session_gap: {beyond['n']} session(s) of {business_date.isoformat()} "
                f"still reach past {iso_ms(read[1])} after widening the read by "
                f"{MAX_WIDENING_DAYS} day(s) (a key that never pauses for {gap_ms} ms?)"
            )
        days += 1


# -- the diff: onto the batch sessions -------------------------------------------------------


def with_holding_session(
    rows: DataFrame, sessions: DataFrame, point: str, carry: Sequence[str] = ()
) -> DataFrame:
    """`rows` plus `_b_start`/`_b_end`: the bounds of the latest session of the row's key and
    currency that starts at or before the row's `point` (null if none), and `_b_<c>` for each
    of the session's columns in `carry`. A key's sessions never overlap, so it is the only one
    that can hold the point: one sort per key, no range join."""
    bounds = [F.col("window_start").alias("s"), F.col("window_end").alias("e")]
    marks = sessions.select(
        *SESSION_OWNER,
        F.col("window_start").alias("_at"),
        F.lit(0).alias("_item"),
        F.struct(*bounds, *[F.col(c) for c in carry]).alias("_b"),
    )
    items = rows.withColumn("_at", F.col(point)).withColumn("_item", F.lit(1))
    upto = (
        Window.partitionBy(*SESSION_OWNER)
        .orderBy("_at", "_item")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return (
        items.unionByName(marks, allowMissingColumns=True)
        .withColumn("_b", F.last("_b", ignorenulls=True).over(upto))
        .where(F.col("_item") == 1)
        .select(
            *rows.columns,
            F.col("_b.s").alias("_b_start"),
            F.col("_b.e").alias("_b_end"),
            *[F.col(f"_b.{c}").alias(f"_b_{c}") for c in carry],
        )
    )


def onto_batch_sessions(located: DataFrame, held: Column, bounds: DayBounds) -> DataFrame:
    """Rows of `with_holding_session` with the bounds of their batch session when it `held`
    them and starts on the date; rows held by none keep their own bounds if they start on
    the date (UNEXPLAINED there); every other row belongs to another date and is dropped."""
    mine = held & window_in_day(bounds, "_b_start")
    orphan = ~held & window_in_day(bounds)
    moved = located.where(mine | orphan).withColumns(
        {
            "window_start": F.when(mine, F.col("_b_start")).otherwise(F.col("window_start")),
            "window_end": F.when(mine, F.col("_b_end")).otherwise(F.col("window_end")),
        }
    )
    return moved.drop("_b_start", "_b_end")


def _held(inside: Column) -> Column:
    return F.col("_b_end").isNotNull() & inside


def stream_per_session(current: DataFrame, sessions: DataFrame, bounds: DayBounds) -> DataFrame:
    """The stream's current sessions (WINDOW_KEY, event_count, amount_sum) summed per batch
    session of the date holding them (`start ≥ B.start`, `end ≤ B.end`), the others of the
    date on their own."""
    located = with_holding_session(current, sessions, "window_start")
    held = _held(F.col("window_end") <= F.col("_b_end"))
    return (
        onto_batch_sessions(located, held, bounds)
        .groupBy(*WINDOW_KEY)
        .agg(
            F.sum("event_count").cast("long").alias("event_count"),
            F.sum("amount_sum").cast("long").alias("amount_sum"),
        )
    )


def stream_rows_per_session(rows: DataFrame, sessions: DataFrame, bounds: DayBounds) -> DataFrame:
    """Every stream row (any revision) with the bounds of the batch session of the date holding
    it, as `stream_per_session` places the current ones, and its own span kept as
    `stream_window_start`/`stream_window_end`."""
    own = rows.withColumn("stream_window_start", F.col("window_start")).withColumn(
        "stream_window_end", F.col("window_end")
    )
    located = with_holding_session(own, sessions, "window_start")
    return onto_batch_sessions(located, _held(F.col("window_end") <= F.col("_b_end")), bounds)


def events_per_session(firsts: DataFrame, sessions: DataFrame, bounds: DayBounds) -> DataFrame:
    """First arrivals (`first_arrivals_in`) with the bounds of the batch session of the date
    holding their event time as `window_start`/`window_end` (the sessions are made of them, so
    each is held; those of sessions of other dates are dropped)."""
    located = with_holding_session(firsts, sessions, "event_time")
    mine = _held(F.col("event_time") < F.col("_b_end")) & window_in_day(bounds, "_b_start")
    return (
        located.where(mine)
        .withColumnRenamed("_b_start", "window_start")
        .withColumnRenamed("_b_end", "window_end")
    )


def late_per_session(late: DataFrame, sessions: DataFrame, bounds: DayBounds) -> DataFrame:
    """Late rows (`late_arrivals`) with the bounds of the batch session of the date holding
    their event time, or their own span when none does and they start on the date; ready
    for `late_totals`."""
    located = with_holding_session(late, sessions, "event_time")
    held = _held(F.col("event_time") < F.col("_b_end"))
    return onto_batch_sessions(located, held, bounds)
