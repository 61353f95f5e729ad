"""streaming/watermark.py, table-tested against hand-computed values: advance_watermark, and
what the watermark means for a window (closed, revisable; the Column twins agree in the JVM).

Times are seconds (x 1000 ms) as in the worked example of docs/semantics.md; L = 10 s and
the idle timeout is 60 s unless a case says otherwise.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import pytest

from streaming.watermark import (
    WatermarkState,
    advance_watermark,
    closed,
    closed_col,
    final_after_ms,
    final_through_ms,
    revisable,
    revisable_col,
)

S = 1_000
L = 10 * S
IDLE = 60 * S


def state(wm: int | None, hw: dict[int, int], seen: dict[int, int]) -> WatermarkState:
    return WatermarkState(
        None if wm is None else wm * S,
        {p: v * S for p, v in hw.items()},
        {p: v * S for p, v in seen.items()},
    )


EMPTY = state(None, {}, {})


class Case(NamedTuple):
    why: str
    prev: WatermarkState
    batch_hw: dict[int, int]  # seconds
    now: float  # seconds
    wm: float | None  # expected watermark after, seconds
    idle: dict[int, bool]
    regression: int | None = None  # seconds
    hw: dict[int, int] | None = None  # expected high-water marks, if the case checks them
    policy: str = "partition-min"
    lateness: int = L
    idle_timeout: int = IDLE
    by_partition: dict[int, int] | None = None  # L_p in ms where it is not `lateness`


CASES = [
    Case(
        "first report: min(5, 20) - 10",
        EMPTY,
        {0: 5, 1: 20},
        30,
        -5,
        {0: False, 1: False},
        hw={0: 5, 1: 20},
    ),
    Case(
        "min over partitions: min(90, 75) - 10",
        state(-5, {0: 5, 1: 20}, {0: 30, 1: 30}),
        {0: 90, 1: 75},
        90,
        65,
        {0: False, 1: False},
    ),
    Case(
        "a partition not yet known does not hold the watermark back",
        EMPTY,
        {0: 50},
        60,
        40,
        {0: False},
    ),
    Case(
        "a new partition far behind: the computed value regresses, kept and reported",
        state(40, {0: 50}, {0: 60}),
        {1: 10},
        70,
        40,
        {0: False, 1: False},
        regression=40,
        hw={0: 50, 1: 10},
    ),
    Case(
        "idle partition excluded: p0 silent 100 s >= 60 s",
        state(80, {0: 90, 1: 110}, {0: 100, 1: 100}),
        {1: 190},
        200,
        180,
        {0: True, 1: False},
    ),
    Case(
        "idle exactly at the timeout (now - seen == timeout)",
        state(80, {0: 90, 1: 110}, {0: 100, 1: 100}),
        {1: 190},
        160,
        180,
        {0: True, 1: False},
    ),
    Case(
        "one ms short of the timeout is still active",
        state(80, {0: 90, 1: 110}, {0: 100, 1: 100}),
        {1: 190},
        159.999,
        80,
        {0: False, 1: False},
    ),
    Case(
        "idle partition rejoining holds the watermark again: min(95, 190) - 10 < 180",
        state(180, {0: 90, 1: 190}, {0: 100, 1: 200}),
        {0: 95},
        210,
        180,
        {0: False, 1: False},
        regression=95,
        hw={0: 95, 1: 190},
    ),
    Case(
        "global-max: max(90, 75) - 10, the lagging partition does not hold it",
        state(-5, {0: 5, 1: 20}, {0: 30, 1: 30}),
        {0: 90, 1: 75},
        90,
        80,
        {0: False, 1: False},
        policy="global-max",
    ),
    Case(
        "global-max ignores idleness (all idle still advances)",
        state(80, {0: 90, 1: 110}, {0: 100, 1: 100}),
        {},
        500,
        100,
        {0: True, 1: True},
        policy="global-max",
    ),
    Case(
        "a lower batch high-water mark does not lower hw; equal candidate is no regression",
        state(80, {0: 90}, {0: 100}),
        {0: 30},
        110,
        80,
        {0: False},
        hw={0: 90},
    ),
    Case(
        "idle_timeout 0 disables idleness",
        state(80, {0: 90, 1: 500}, {0: 100, 1: 1000}),
        {1: 1_000},
        10_000,
        80,
        {0: False, 1: False},
        idle_timeout=0,
    ),
    Case(
        "all partitions idle: no candidate, the watermark stays",
        state(80, {0: 90, 1: 110}, {0: 100, 1: 100}),
        {},
        500,
        80,
        {0: True, 1: True},
    ),
    Case(
        "all idle before any watermark: stays none",
        state(None, {0: 90}, {0: 100}),
        {},
        500,
        None,
        {0: True},
    ),
    Case("no partition known at all: stays none", EMPTY, {}, 500, None, {}),
    Case(
        "L = 0: the watermark is the slowest active partition's high-water mark",
        EMPTY,
        {0: 7, 1: 3},
        10,
        3,
        {0: False, 1: False},
        lateness=0,
    ),
    Case(
        "a partition sending this batch is never idle, even with a tiny timeout",
        state(0, {0: 10, 1: 10}, {0: 0, 1: 0}),
        {0: 20, 1: 30},
        100,
        10,
        {0: False, 1: False},
        idle_timeout=1,
    ),
    # Per-source lateness: each partition's bound is hw_p - L_p, combined by the minimum.
    Case(
        "per-source: radar p0 (L 100 ms) at 100 s, poller p1 (L 30 s) at 100 s: min(99.9, 70)",
        EMPTY,
        {0: 100, 1: 100},
        100,
        70,
        {0: False, 1: False},
        by_partition={0: 100, 1: 30 * S},
    ),
    Case(
        "per-source: the radar far behind holds the watermark at its own tight bound",
        EMPTY,
        {0: 50, 1: 100},
        100,
        49.9,
        {0: False, 1: False},
        by_partition={0: 100, 1: 30 * S},
    ),
    Case(
        "per-source: a partition without a bound of its own uses `lateness` (10 s)",
        EMPTY,
        {0: 100, 2: 100},
        100,
        90,
        {0: False, 2: False},
        by_partition={0: 100, 1: 30 * S},
    ),
    Case(
        "per-source: the slow source idle, only the radar's bound counts: 200 - 0.1",
        state(70, {0: 100, 1: 100}, {0: 100, 1: 100}),
        {0: 200},
        200,
        199.9,
        {0: False, 1: True},
        by_partition={0: 100, 1: 30 * S},
    ),
    Case(
        "per-source under global-max: max(100 - 0.1, 120 - 30)",
        EMPTY,
        {0: 100, 1: 120},
        120,
        99.9,
        {0: False, 1: False},
        policy="global-max",
        by_partition={0: 100, 1: 30 * S},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
def test_advance_watermark(case: Case) -> None:
    now = round(case.now * S)
    out = advance_watermark(
        case.prev,
        {p: v * S for p, v in case.batch_hw.items()},
        now,
        case.lateness,
        case.idle_timeout,
        case.policy,
        case.by_partition,
    )
    assert out.state.watermark_ms == (None if case.wm is None else round(case.wm * S))
    assert out.idle == case.idle
    assert out.regression_ms == (None if case.regression is None else case.regression * S)
    if case.hw is not None:
        assert dict(out.state.high_water_ms) == {p: v * S for p, v in case.hw.items()}
    for partition in case.batch_hw:  # seen_p = now for every partition of the batch
        assert out.state.last_seen_ms[partition] == now
    for partition, seen in case.prev.last_seen_ms.items():
        if partition not in case.batch_hw:
            assert out.state.last_seen_ms[partition] == seen


def test_regression_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    case = next(c for c in CASES if c.regression is not None)
    with caplog.at_level(logging.INFO, logger="streaming.watermark"):
        advance_watermark(
            case.prev, {p: v * S for p, v in case.batch_hw.items()}, round(case.now * S), L, IDLE
        )
    assert "regression" in caplog.text


def test_previous_state_is_not_mutated() -> None:
    prev = state(80, {0: 90}, {0: 100})
    advance_watermark(prev, {0: 200, 1: 300}, 300 * S, L, IDLE)
    assert prev == state(80, {0: 90}, {0: 100})


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="policy"):
        advance_watermark(EMPTY, {0: 1}, 1, L, IDLE, "newest")


# -- expected partitions: the minimum waits for every expected input ----------------------------
class ExpectedCase(NamedTuple):
    why: str
    prev: WatermarkState
    batch_hw: dict[int, int]  # seconds
    now: int  # seconds
    expected: frozenset[int]
    wm: int | None  # expected watermark after, seconds
    unheard: dict[int, int]  # expected unheard after: partition -> since, seconds
    idle: dict[int, bool]
    idle_timeout: int = IDLE
    policy: str = "partition-min"


def waiting(wm: int | None, hw: dict[int, int], seen: dict[int, int], unheard: dict[int, int]):
    return WatermarkState(
        None if wm is None else wm * S,
        {p: v * S for p, v in hw.items()},
        {p: v * S for p, v in seen.items()},
        {},
        {p: v * S for p, v in unheard.items()},
    )


EXPECTED_CASES = [
    ExpectedCase(
        "partition 1 expected, not heard: no watermark although 0 and 2 report",
        EMPTY,
        {0: 50, 2: 40},
        50,
        frozenset({0, 1, 2}),
        None,
        {1: 50},
        {0: False, 1: False, 2: False},
    ),
    ExpectedCase(
        "still unheard later: the watermark stays undefined, since keeps the first batch",
        waiting(None, {0: 50, 2: 40}, {0: 50, 2: 50}, {1: 50}),
        {0: 80},
        80,
        frozenset({0, 1, 2}),
        None,
        {1: 50},
        {0: False, 1: False, 2: False},
    ),
    ExpectedCase(
        "1 reports: min(80, 45, 40) - 10; nothing unheard",
        waiting(None, {0: 80, 2: 40}, {0: 80, 2: 50}, {1: 50}),
        {1: 45},
        90,
        frozenset({0, 1, 2}),
        30,
        {},
        {0: False, 1: False, 2: False},
    ),
    ExpectedCase(
        "unheard for the idle timeout (60 s since 50): idle, excluded, min(100, 90) - 10",
        waiting(None, {0: 80, 2: 40}, {0: 100, 2: 100}, {1: 50}),
        {0: 100, 2: 90},
        110,
        frozenset({0, 1, 2}),
        80,
        {1: 50},
        {0: False, 1: True, 2: False},
    ),
    ExpectedCase(
        "idleness off: an unheard partition holds the watermark forever",
        waiting(None, {0: 80}, {0: 100}, {1: 50}),
        {0: 500},
        500,
        frozenset({0, 1}),
        None,
        {1: 50},
        {0: False, 1: False},
        idle_timeout=0,
    ),
    ExpectedCase(
        "expected from a later batch on (a setting added to a running stream): the "
        "watermark stays put, never back",
        waiting(70, {0: 80}, {0: 100}, {}),
        {0: 120},
        120,
        frozenset({0, 5}),
        70,
        {5: 120},
        {0: False, 5: False},
    ),
    ExpectedCase(
        "a partition no longer expected is forgotten: the minimum is back",
        waiting(None, {0: 80}, {0: 100}, {1: 50}),
        {0: 120},
        120,
        frozenset({0}),
        110,
        {},
        {0: False},
    ),
    ExpectedCase(
        "global-max waits too",
        EMPTY,
        {0: 50},
        50,
        frozenset({0, 1}),
        None,
        {1: 50},
        {0: False, 1: False},
        policy="global-max",
    ),
    ExpectedCase(
        "heard from a control record only: heard (source watermark 95)",
        waiting(None, {0: 100}, {0: 100}, {1: 50}),
        {},
        100,
        frozenset({0, 1}),
        90,
        {},
        {0: False, 1: False},
    ),
]


@pytest.mark.parametrize("case", EXPECTED_CASES, ids=[c.why for c in EXPECTED_CASES])
def test_expected_partitions(case: ExpectedCase) -> None:
    # the last case's batch carries a control record of partition 1 (watermark 95 s)
    control = {1: 95 * S} if case.why.startswith("heard from a control") else None
    out = advance_watermark(
        case.prev,
        {p: v * S for p, v in case.batch_hw.items()},
        case.now * S,
        L,
        case.idle_timeout,
        case.policy,
        batch_source_watermark_ms=control,
        expected_partitions=case.expected,
    )
    assert out.state.watermark_ms == (None if case.wm is None else case.wm * S)
    assert dict(out.state.unheard_since_ms) == {p: v * S for p, v in case.unheard.items()}
    assert out.idle == case.idle


# -- what the watermark means for a window: closed, revisable ----------------------------------
class WindowCase(NamedTuple):
    why: str
    end: int  # ms
    wm: int | None  # ms
    slack: int  # ms: the allowed lateness (plus a gap, or the dedup horizon)
    closed: bool  # by hand
    revisable: bool  # by hand


WINDOW_CASES = [
    WindowCase(
        "no watermark yet: nothing closed, everything can change", 60 * S, None, L, False, True
    ),
    WindowCase("1 ms before the end: open (on time)", 60 * S, 60 * S - 1, L, False, True),
    WindowCase(
        "at the end: closed (end <= WM), revisable (allowed late)", 60 * S, 60 * S, L, True, True
    ),
    WindowCase("1 ms short of end + slack: still revisable", 60 * S, 70 * S - 1, L, True, True),
    WindowCase("at end + slack: past changing (late, evicted)", 60 * S, 70 * S, L, True, False),
    WindowCase("far past: late", 60 * S, 1_000 * S, L, True, False),
    WindowCase("slack 0: final the moment it closes", 60 * S, 60 * S, 0, True, False),
    WindowCase("slack 0, 1 ms before the end: open", 60 * S, 60 * S - 1, 0, False, True),
    WindowCase(
        "more slack (a dedup horizon): remembered past G", 60 * S, 75 * S, 2 * L, True, True
    ),
    WindowCase("before 1970 like after it", -60 * S, -55 * S, L, True, True),
    WindowCase("before 1970, at end + slack", -60 * S, -50 * S, L, True, False),
]


@pytest.mark.parametrize("case", WINDOW_CASES, ids=[c.why for c in WINDOW_CASES])
def test_window_against_the_watermark(case: WindowCase) -> None:
    assert closed(case.end, case.wm) == case.closed
    assert revisable(case.end, case.wm, case.slack) == case.revisable
    if case.wm is not None:  # the two thresholds state the same rule from either side
        assert revisable(case.end, case.wm, case.slack) == (
            case.wm < final_after_ms(case.end, case.slack)
        )
        assert revisable(case.end, case.wm, case.slack) == (
            case.end > final_through_ms(case.wm, case.slack)
        )


def test_window_predicates_in_the_jvm_agree_with_the_table(spark) -> None:
    """closed_col / revisable_col over `window_end`, every case in one Spark job."""
    from functools import reduce

    from pyspark.sql import functions as F

    frames = [
        spark.range(1)
        .select(F.lit(i).alias("case"), F.timestamp_millis(F.lit(c.end)).alias("window_end"))
        .select(
            "case",
            closed_col(F.col("window_end"), c.wm).alias("closed"),
            revisable_col(F.col("window_end"), c.wm, c.slack).alias("revisable"),
        )
        for i, c in enumerate(WINDOW_CASES)
    ]
    rows = reduce(lambda a, b: a.unionByName(b), frames).collect()
    got = {r["case"]: (r["closed"], r["revisable"]) for r in rows}
    expected = {i: (c.closed, c.revisable) for i, c in enumerate(WINDOW_CASES)}
    assert got == expected
