"""Window arithmetic (tally/windows.py), table-tested: the pure version and the Column version."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import reduce
from typing import NamedTuple

import pytest

from tally.windows import (
    aggregate_sessions,
    last_window_ms,
    merge_intervals,
    window_range_ms,
    window_start_col,
    window_start_ms,
    windowing_problem,
    windows_of_ms,
    windows_per_event,
    with_window,
    with_windows,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000


def ms(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> int:
    """Epoch ms of a UTC wall-clock time: datetime(...) - 1970-01-01."""
    value = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
    return (value - EPOCH) // timedelta(milliseconds=1)


class Case(NamedTuple):
    why: str
    window_ms: int
    t_ms: int
    start_ms: int  # computed by hand (or from calendar arithmetic), never by the code


CASES = [
    Case("the epoch itself starts a window", MINUTE, 0, 0),
    Case("last millisecond of the first window", MINUTE, MINUTE - 1, 0),
    Case("an exact boundary belongs to the next window", MINUTE, MINUTE, MINUTE),
    Case("one ms past a boundary", MINUTE, MINUTE + 1, MINUTE),
    Case(
        "a real time: 09:42:17.125 is in [09:42, 09:43)",
        MINUTE,
        ms(2026, 11, 21, 9, 42, 17, 125_000),
        ms(2026, 11, 21, 9, 42),
    ),
    Case(
        "a real boundary: 09:43:00.000 opens [09:43, 09:44)",
        MINUTE,
        ms(2026, 11, 21, 9, 43),
        ms(2026, 11, 21, 9, 43),
    ),
    Case("one ms before 1970 is in the window ending at the epoch", MINUTE, -1, -MINUTE),
    Case("a pre-1970 exact boundary starts its own window", MINUTE, -MINUTE, -MINUTE),
    Case("one ms before a pre-1970 boundary", MINUTE, -MINUTE - 1, -2 * MINUTE),
    Case(
        "pre-1970 hour window (floor, not truncation toward zero)",
        HOUR,
        ms(1969, 12, 31, 23, 30),
        ms(1969, 12, 31, 23),
    ),
    Case("long before 1970", HOUR, ms(1900, 3, 1, 12, 59, 59, 999_000), ms(1900, 3, 1, 12)),
    Case("1 ms windows: every millisecond is its own window", 1, 12_345, 12_345),
    Case("1 ms windows before 1970", 1, -7, -7),
    Case(
        "day windows align to UTC midnight",
        DAY,
        ms(2026, 11, 21, 23, 59, 59, 999_000),
        ms(2026, 11, 21),
    ),
    Case(
        "week windows align to the epoch, a Thursday: Sat 21 Nov -> Thu 19 Nov",
        7 * DAY,
        ms(2026, 11, 21, 9, 42),
        ms(2026, 11, 19),
    ),
    Case("W not dividing a minute: 7 s windows", 7_000, 20_000, 14_000),
    Case("7 s windows before 1970", 7_000, -1, -7_000),
    Case(
        "large W (10^12 ms, ~31.7 years): 2026 is in [2001-09-09T01:46:40Z, ...)",
        10**12,
        ms(2026, 11, 21),
        10**12,
    ),
    Case("large W before 1970", 10**12, -1, -(10**12)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
def test_window_start_pure(case: Case) -> None:
    assert window_start_ms(case.t_ms, case.window_ms) == case.start_ms
    assert window_range_ms(case.t_ms, case.window_ms) == (
        case.start_ms,
        case.start_ms + case.window_ms,
    )


def test_column_version_agrees_with_the_table(spark) -> None:
    """with_window / window_start_col in the JVM, all cases in one Spark job."""
    from pyspark.sql import functions as F

    frames = [
        with_window(
            spark.range(1).select(
                F.lit(i).alias("case"), F.timestamp_millis(F.lit(c.t_ms)).alias("event_time")
            ),
            c.window_ms,
        ).withColumn("start_col", window_start_col(F.col("event_time"), c.window_ms))
        for i, c in enumerate(CASES)
    ]
    rows = (
        reduce(lambda a, b: a.unionByName(b), frames)
        .select(
            "case",
            F.unix_millis("window_start").alias("start"),
            F.unix_millis("window_end").alias("end"),
            F.unix_millis("start_col").alias("start_col"),
        )
        .collect()
    )
    got = {r["case"]: (r["start"], r["end"], r["start_col"]) for r in rows}
    expected = {i: (c.start_ms, c.start_ms + c.window_ms, c.start_ms) for i, c in enumerate(CASES)}
    mismatches = {
        CASES[i].why: (got.get(i), want) for i, want in expected.items() if got.get(i) != want
    }
    assert not mismatches


# -- hopping windows: size S sliding by H, S/H windows per event ----------------------------
class HopCase(NamedTuple):
    why: str
    window_ms: int
    slide_ms: int | None
    t_ms: int
    starts_ms: list[int]  # every window holding t, ascending, by hand


HOP_CASES = [
    HopCase("slide None is tumbling: one window", MINUTE, None, 90_000, [MINUTE]),
    HopCase("slide = size is tumbling too", MINUTE, MINUTE, 90_000, [MINUTE]),
    HopCase(
        "5 min every 1 min: 09:42:17 is in the five windows starting 09:38 .. 09:42",
        5 * MINUTE,
        MINUTE,
        ms(2026, 11, 21, 9, 42, 17),
        [ms(2026, 11, 21, 9, m) for m in (38, 39, 40, 41, 42)],
    ),
    HopCase(
        "an exact slide boundary opens a window and leaves the oldest one",
        5 * MINUTE,
        MINUTE,
        ms(2026, 11, 21, 9, 43),
        [ms(2026, 11, 21, 9, m) for m in (39, 40, 41, 42, 43)],
    ),
    HopCase("S/H = 2 at the epoch", 10_000, 5_000, 0, [-5_000, 0]),
    HopCase("S/H = 2 one ms before 1970 (floor)", 10_000, 5_000, -1, [-10_000, -5_000]),
    HopCase(
        "S/H = 3 with a slide not dividing a minute", 21_000, 7_000, 20_000, [0, 7_000, 14_000]
    ),
]


@pytest.mark.parametrize("case", HOP_CASES, ids=[c.why for c in HOP_CASES])
def test_windows_of_an_event(case: HopCase) -> None:
    windows = windows_of_ms(case.t_ms, case.window_ms, case.slide_ms)
    assert windows == [(s, s + case.window_ms) for s in case.starts_ms]
    assert all(start <= case.t_ms < end for start, end in windows)
    assert last_window_ms(case.t_ms, case.window_ms, case.slide_ms) == windows[-1]
    assert windows_per_event(case.window_ms, case.slide_ms) == len(case.starts_ms)


def test_with_windows_in_the_jvm_agrees_with_the_table(spark) -> None:
    """with_windows (explode) in the JVM, all hopping cases in one Spark job."""
    from pyspark.sql import functions as F

    frames = [
        with_windows(
            spark.range(1).select(
                F.lit(i).alias("case"), F.timestamp_millis(F.lit(c.t_ms)).alias("event_time")
            ),
            c.window_ms,
            c.slide_ms,
        )
        for i, c in enumerate(HOP_CASES)
    ]
    rows = (
        reduce(lambda a, b: a.unionByName(b), frames)
        .select(
            "case", F.unix_millis("window_start").alias("s"), F.unix_millis("window_end").alias("e")
        )
        .collect()
    )
    got: dict[int, list[tuple[int, int]]] = {}
    for r in rows:
        got.setdefault(r["case"], []).append((r["s"], r["e"]))
    assert {i: sorted(v) for i, v in got.items()} == {
        i: [(s, s + c.window_ms) for s in c.starts_ms] for i, c in enumerate(HOP_CASES)
    }


@pytest.mark.parametrize(
    ("window_ms", "slide_ms", "gap_ms", "error"),
    [
        (MINUTE, None, 0, None),  # tumbling
        (MINUTE, 0, 0, None),  # a slide of 0 is tumbling too
        (5 * MINUTE, MINUTE, 0, None),  # S/H = 5
        (MINUTE, None, 10_000, None),  # sessions (the window only sizes the curve)
        (5 * MINUTE, 2 * MINUTE, 0, "window_slide: the window 5m must be a multiple"),  # 5/2
        (MINUTE, 2 * MINUTE, 0, "window_slide: the window 1m must be a multiple"),  # H > S
        (0, None, 0, "window: must be positive"),
        (MINUTE, None, -1, "session_gap: must be positive (or 0: off)"),
        (5 * MINUTE, MINUTE, 10_000, "session_gap and window_slide: both set"),  # two kinds
    ],
)
def test_windowing_problem(
    window_ms: int, slide_ms: int | None, gap_ms: int, error: str | None
) -> None:
    got = windowing_problem(window_ms, slide_ms, gap_ms)
    assert got is None if error is None else (got is not None and got.startswith(error))


# -- session windows --------------------------------------------------------------------------
SESSION_CASES = [
    # (why, event times in s, gap s, sessions [start, end) in s, by hand)
    ("one event: its span", [5], 10, [(5, 15)]),
    ("steps under the gap chain into one session", [0, 4, 13], 10, [(0, 23)]),
    ("a pause of exactly the gap separates", [0, 10], 10, [(0, 10), (10, 20)]),
    ("a pause of one ms under the gap merges", [0, 9.999], 10, [(0, 19.999)]),
    ("arrival order does not matter: sorted first", [33, 0, 13, 4], 10, [(0, 23), (33, 43)]),
    ("equal times are one session", [7, 7, 7], 10, [(7, 17)]),
    ("before 1970 like after it", [-25, -18, 0], 10, [(-25, -8), (0, 10)]),
    ("a middle event bridges two sessions", [0, 14, 7], 10, [(0, 24)]),
]


@pytest.mark.parametrize(("why", "times", "gap", "sessions"), SESSION_CASES)
def test_merge_intervals(why: str, times: list[float], gap: int, sessions: list) -> None:
    spans = [(int(s * 1000), int(s * 1000) + gap * 1000) for s in times]
    assert merge_intervals(spans) == [(int(a * 1000), int(b * 1000)) for a, b in sessions], why


def test_aggregate_sessions_in_the_jvm_agrees_with_the_table(spark) -> None:
    """Every case at once, one key per case (and a second key, and the same key in a second
    currency, beside each case: keys and currencies never merge); each event's amount is a
    distinct power of 10, so a sum names its events."""
    from pyspark.sql import functions as F

    rows = []
    expected = {}
    for number, (_, times, gap, sessions) in enumerate(SESSION_CASES):
        if gap != 10:
            continue
        owners = ((f"case{number}", "USD"), (f"case{number}", "JPY"), (f"other{number}", "USD"))
        for key, currency in owners:
            amounts = [10**i for i in range(len(times))]
            for time, amount in zip(times, amounts, strict=True):
                rows.append((key, currency, int(time * 1000), amount))
            for a, b in sessions:
                inside = [m for s, m in zip(times, amounts, strict=True) if a <= s < b]
                span = (int(a * 1000), int(b * 1000))
                expected[(key, currency, *span)] = (len(inside), sum(inside))
    events = spark.createDataFrame(
        rows, "key STRING, currency STRING, ms BIGINT, amount BIGINT"
    ).withColumn("event_time", F.timestamp_millis("ms"))
    got = {
        (r["key"], r["currency"], r["s"], r["e"]): (r["event_count"], r["amount_sum"])
        for r in aggregate_sessions(events, 10_000)
        .select(
            "*", F.unix_millis("window_start").alias("s"), F.unix_millis("window_end").alias("e")
        )
        .collect()
    }
    assert got == expected
