"""The one definition of windows and window aggregates, shared by the speed and batch layers.

Event-time windows of size S sliding by H (S a multiple of H), aligned to the Unix epoch, in
milliseconds: the windows `[k*H, k*H + S)`. H = S (the default) gives tumbling windows, one
per event; H < S gives hopping windows, S/H per event. The pure functions state the
arithmetic; the Column functions are the same arithmetic in the JVM. Both layers aggregate
with `aggregate_windows`, so a gap between them can only come from lateness, never from two
implementations drifting apart.

Session windows (a gap D instead of a size): each event spans `[t, t + D)`, and a key's spans
are merged into sessions by `session_ids` / `merge_sessions` (docs/semantics.md, "Session
windows"); the batch layer merges first arrivals, the speed layer merges a batch's spans with
the sessions it holds, both with this code.

`windowing_problem` is the one check of a window size, slide and gap (the settings and the
nightly). Pure stdlib at import (the settings import this module, and the DAG files import the
settings at parse time); the Column functions import pyspark when they are called.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tally.durations import format_duration

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# A window's identity: its bounds, the key and the currency (amounts of two currencies are
# never added: each is a total of its own).
WINDOW_KEY = ("window_start", "window_end", "key", "currency")
# The rows a session merges over: one key's spans in one currency.
SESSION_OWNER = ("key", "currency")


def window_start_ms(event_time_ms: int, window_ms: int) -> int:
    """Start of the window holding `event_time_ms` (floor division: correct before 1970 too)."""
    return event_time_ms - (event_time_ms % window_ms)


def window_range_ms(event_time_ms: int, window_ms: int) -> tuple[int, int]:
    start = window_start_ms(event_time_ms, window_ms)
    return start, start + window_ms


def slide_of(window_ms: int, slide_ms: int | None) -> int:
    """The slide H: `slide_ms`, or the size (tumbling) when it is None or 0."""
    return slide_ms or window_ms


def windows_per_event(window_ms: int, slide_ms: int | None) -> int:
    """S/H: how many windows hold each event (1 for tumbling windows)."""
    return window_ms // slide_of(window_ms, slide_ms)


def window_kind(window_ms: int, slide_ms: int | None, session_gap_ms: int = 0) -> str:
    if session_gap_ms:
        return "session"
    return "tumbling" if slide_of(window_ms, slide_ms) == window_ms else "hopping"


def describe_windowing(window_ms: int, slide_ms: int | None = None, session_gap_ms: int = 0) -> str:
    """The window kind and its sizes as people write them: `tumbling 1m`, `hopping 5m every
    1m` or `session, gap 10s` (the CLI's summary and the report say the same)."""
    kind = window_kind(window_ms, slide_ms, session_gap_ms)
    if kind == "session":
        return f"session, gap {format_duration(session_gap_ms)}"
    if kind == "tumbling":
        return f"tumbling {format_duration(window_ms)}"
    slide = format_duration(slide_of(window_ms, slide_ms))
    return f"hopping {format_duration(window_ms)} every {slide}"


def windowing_problem(window_ms: int, slide_ms: int | None, session_gap_ms: int) -> str | None:
    """Why a window size, slide (0 or None: tumbling) and session gap (0: fixed windows) make
    no windowing, in one line naming the setting; None when they make one (docs/semantics.md,
    "Windows"). The one check: the settings and the nightly use it."""
    slide = slide_ms or 0
    if window_ms <= 0:
        return f"window: must be positive, got {format_duration(window_ms)}"
    if slide < 0 or slide > window_ms or (slide and window_ms % slide):
        return (
            f"window_slide: the window {format_duration(window_ms)} must be a multiple of the "
            f"slide, got {format_duration(slide)}"
        )
    if session_gap_ms < 0:
        return f"session_gap: must be positive (or 0: off), got {format_duration(session_gap_ms)}"
    if session_gap_ms and slide:
        return (
            "session_gap and window_slide: both set; pick one window kind (sessions, or "
            "hopping windows)"
        )
    return None


def last_window_ms(event_time_ms: int, window_ms: int, slide_ms: int | None) -> tuple[int, int]:
    """The latest-starting window holding the time: it ends last, so it closes last."""
    start = window_start_ms(event_time_ms, slide_of(window_ms, slide_ms))
    return start, start + window_ms


def windows_of_ms(
    event_time_ms: int, window_ms: int, slide_ms: int | None
) -> list[tuple[int, int]]:
    """Every window holding the time, by start, ascending (S/H of them)."""
    last_start, _ = last_window_ms(event_time_ms, window_ms, slide_ms)
    slide = slide_of(window_ms, slide_ms)
    count = windows_per_event(window_ms, slide_ms)
    starts = [last_start - k * slide for k in reversed(range(count))]
    return [(start, start + window_ms) for start in starts]


def window_start_col(event_time: Column, window_ms: int) -> Column:
    from pyspark.sql import functions as F

    ms = F.unix_millis(event_time)
    # pmod keeps pre-epoch times in the window below them, like Python's floor modulo.
    return F.timestamp_millis(ms - F.pmod(ms, F.lit(window_ms)))


def with_window(df: DataFrame, window_ms: int, time_col: str = "event_time") -> DataFrame:
    """Add `window_start`/`window_end` (timestamps) for the window holding `time_col`."""
    from pyspark.sql import functions as F

    start = window_start_col(F.col(time_col), window_ms)
    return df.withColumn("window_start", start).withColumn(
        "window_end", F.timestamp_millis(F.unix_millis(start) + F.lit(window_ms))
    )


def with_last_window(
    df: DataFrame, window_ms: int, slide_ms: int | None, time_col: str = "event_time"
) -> DataFrame:
    """Add `window_start`/`window_end` of the latest-starting window holding `time_col` (the
    only one for tumbling windows)."""
    return df.withColumns(last_window_columns(window_ms, slide_ms, time_col))


def last_window_columns(
    window_ms: int, slide_ms: int | None, time_col: str = "event_time"
) -> dict[str, Column]:
    """`with_last_window`'s columns: `window_start`, `window_end`."""
    from pyspark.sql import functions as F

    start = window_start_col(F.col(time_col), slide_of(window_ms, slide_ms))
    return {
        "window_start": start,
        "window_end": F.timestamp_millis(F.unix_millis(start) + F.lit(window_ms)),
    }


def explode_windows(df: DataFrame, window_ms: int, slide_ms: int | None) -> DataFrame:
    """One row per window of each row, from the row's last window (`with_last_window`): the
    k-th earlier window starts k slides before it. Tumbling windows: `df` unchanged."""
    from pyspark.sql import functions as F

    count = windows_per_event(window_ms, slide_ms)
    if count == 1:
        return df
    slide = slide_of(window_ms, slide_ms)
    # a generator cannot be nested in an expression: explode the offsets, then use them
    back = F.sequence(
        F.lit(0).cast("long"), F.lit((count - 1) * slide).cast("long"), F.lit(slide).cast("long")
    )
    return (
        df.withColumn("_back_ms", F.explode(back))
        .withColumn(
            "window_start",
            F.timestamp_millis(F.unix_millis("window_start") - F.col("_back_ms")),
        )
        .withColumn(
            "window_end", F.timestamp_millis(F.unix_millis("window_end") - F.col("_back_ms"))
        )
        .drop("_back_ms")
    )


def with_windows(
    df: DataFrame, window_ms: int, slide_ms: int | None, time_col: str = "event_time"
) -> DataFrame:
    """One row per (row, window holding `time_col`), with `window_start`/`window_end`."""
    return explode_windows(with_last_window(df, window_ms, slide_ms, time_col), window_ms, slide_ms)


def aggregate_windows(df: DataFrame) -> DataFrame:
    """Count and exact integer sum of `amount` per (window_start, window_end, key, currency)."""
    from pyspark.sql import functions as F

    return df.groupBy(*WINDOW_KEY).agg(
        F.count(F.lit(1)).alias("event_count"),
        F.sum("amount").cast("long").alias("amount_sum"),
    )


# -- session windows ------------------------------------------------------------------------
SESSION_ID = "session_id"


def merge_intervals(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sessions of one key's intervals `[start, end)`: sorted by (start, end), an interval
    starts a new session when its start is at or past every earlier end (touching intervals
    stay apart: a pause of exactly the gap separates)."""
    sessions: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if sessions and start < sessions[-1][1]:
            sessions[-1] = (sessions[-1][0], max(sessions[-1][1], end))
        else:
            sessions.append((start, end))
    return sessions


def with_span(df: DataFrame, gap_ms: int, time_col: str = "event_time") -> DataFrame:
    """Add an event's span `[t, t + gap)` as `window_start`/`window_end`."""
    return df.withColumns(span_columns(gap_ms, time_col))


def span_columns(gap_ms: int, time_col: str = "event_time") -> dict[str, Column]:
    """`with_span`'s columns: `window_start`, `window_end`."""
    from pyspark.sql import functions as F

    return {
        "window_start": F.col(time_col),
        "window_end": F.timestamp_millis(F.unix_millis(time_col) + F.lit(gap_ms)),
    }


def session_ids(intervals: DataFrame, by: Sequence[str] = SESSION_OWNER) -> DataFrame:
    """Add `session_id` to rows holding `window_start`/`window_end`: `merge_intervals` per
    `by`, in the JVM (one sort: gaps and islands). Ids number the sessions of each key and
    currency."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy(*by).orderBy("window_start", "window_end")
    reach = F.max("window_end").over(order.rowsBetween(Window.unboundedPreceding, -1))
    starts = (reach.isNull() | (F.col("window_start") >= reach)).cast("long")
    running = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        intervals.withColumn("_starts", starts)
        .withColumn(SESSION_ID, F.sum("_starts").over(running))
        .drop("_starts")
    )


def merge_sessions(intervals: DataFrame, *extra: Column) -> DataFrame:
    """One row per session (WINDOW_KEY, event_count, amount_sum) of interval rows that carry
    WINDOW_KEY, event_count and amount_sum; `extra` aggregates over each session's intervals
    (aliased) follow them (the stream's bookkeeping of the sessions it held)."""
    from pyspark.sql import functions as F

    merged = (
        session_ids(intervals)
        .groupBy(*SESSION_OWNER, SESSION_ID)
        .agg(
            F.min("window_start").alias("window_start"),
            F.max("window_end").alias("window_end"),
            F.sum("event_count").cast("long").alias("event_count"),
            F.sum("amount_sum").cast("long").alias("amount_sum"),
            *extra,
        )
        .drop(SESSION_ID)
    )
    totals = [*WINDOW_KEY, "event_count", "amount_sum"]
    return merged.select(*totals, *[c for c in merged.columns if c not in totals])


def aggregate_sessions(events: DataFrame, gap_ms: int) -> DataFrame:
    """Sessions (WINDOW_KEY, event_count, amount_sum) of events: their spans, merged."""
    from pyspark.sql import functions as F

    spans = with_span(events, gap_ms).select(
        *WINDOW_KEY,
        F.lit(1).cast("long").alias("event_count"),
        F.col("amount").cast("long").alias("amount_sum"),
    )
    return merge_sessions(spans)
