"""The housekeeping plan and the closing rule: pure functions, one row per case."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from streaming.watermark import closed_through, date_closed_at
from tally import maintenance as M
from tally.dates import epoch_ms, window_reach_ms

H = 3_600_000
MIN = 60_000
EVERY_15M = M.Schedule(compact_interval_ms=15 * MIN, compact_closed=True, vacuum_interval_ms=24 * H)
NOW = 100 * H
# The stream's defaults: a table waits for 50 small files (Delta's auto-compaction threshold).
STREAM = M.Schedule(15 * MIN, True, 24 * H, compact_min_files=50)


def stats(files: int, small: int | None = None, below_closed: int | None = None) -> M.FileStats:
    small = files if small is None else small
    return M.FileStats(files, files * 1000, small, files if below_closed is None else below_closed)


def closed_until(last_closed: str):
    return M.date_closed_by(date.fromisoformat(last_closed), drained=False)


@pytest.mark.parametrize(
    "layout, last, schedule, expected, why",
    [
        (
            {"2026-11-20": stats(30), "2026-11-21": stats(30)},
            {},
            EVERY_15M,
            [("compact_closed", "2026-11-20"), ("compact", "2026-11-21")],
            "a closed date packs to GiB files, the open one to 128 MiB bins",
        ),
        (
            {"2026-11-21": stats(1)},
            {},
            EVERY_15M,
            [],
            "one file alone is never rewritten",
        ),
        (
            {"2026-11-21": stats(5, small=1)},
            {},
            EVERY_15M,
            [],
            "an open date of big files and one small one: nothing to merge",
        ),
        (
            {"2026-11-21": stats(30)},
            {("events", "compact", "2026-11-21"): NOW - 10 * MIN},
            EVERY_15M,
            [],
            "the open date was compacted 10 minutes ago: not again before 15",
        ),
        (
            {"2026-11-21": stats(30)},
            {("events", "compact", "2026-11-21"): NOW - 15 * MIN},
            EVERY_15M,
            [("compact", "2026-11-21")],
            "15 minutes since: due",
        ),
        (
            {"2026-11-20": stats(3)},
            {("events", "compact_closed", "2026-11-20"): NOW - 24 * H},
            EVERY_15M,
            [],
            "a closed date already packed, with two late files since: within the bound of 4",
        ),
        (
            {"2026-11-20": stats(5)},
            {("events", "compact_closed", "2026-11-20"): NOW - 24 * H},
            EVERY_15M,
            [("compact_closed", "2026-11-20")],
            "late events grew a packed closed date past 4 files: packed again",
        ),
        (
            {"2026-11-20": stats(5)},
            {("events", "compact_closed", "2026-11-20"): NOW - 5 * MIN},
            EVERY_15M,
            [],
            "past 4 files but packed 5 minutes ago: at most once an interval",
        ),
        (
            {"2026-11-20": stats(2, small=0, below_closed=2)},
            {},
            EVERY_15M,
            [("compact_closed", "2026-11-20")],
            "a closed date of two 100 MiB files (not small) still packs to one",
        ),
        (
            {"2026-11-20": stats(30), "2026-11-21": stats(30)},
            {},
            M.Schedule(0, True, 0),
            [("compact_closed", "2026-11-20")],
            "compact_interval 0s: open dates are left alone, closed dates still packed",
        ),
        (
            {"2026-11-20": stats(30), "2026-11-21": stats(30)},
            {},
            M.Schedule(15 * MIN, False, 0),
            [("compact", "2026-11-21")],
            "compact_closed_dates off: a closed date is not packed (nor treated as open)",
        ),
        (
            {"2026-11-20": stats(30), "2026-11-21": stats(30)},
            {},
            STREAM,
            [("compact_closed", "2026-11-20")],
            "the stream's threshold: 30 small files of an open date wait; a closed date packs",
        ),
        (
            {"2026-11-21": stats(1)},
            {},
            M.Schedule(15 * MIN, True, 0, compact_min_files=1),
            [],
            "a threshold below two means two: one file alone is never rewritten",
        ),
    ],
)
def test_compactions_of_a_date_partitioned_table(layout, last, schedule, expected, why):
    due = M.compactions_due(
        "events", "event_date", layout, closed_until("2026-11-20"), schedule, NOW, last
    )
    assert [(a.kind, a.partition) for a in due] == expected, why
    for action in due:
        assert action.predicate == f"event_date = '{action.partition}'"
        closed = action.kind == M.COMPACT_CLOSED
        assert action.min_bytes == (M.CLOSED_FILE_BYTES if closed else M.SMALL_FILE_BYTES)


@pytest.mark.parametrize(
    "stats_of_table, last, expected, why",
    [
        (stats(60), {}, True, "an unpartitioned table of small files, never compacted"),
        (stats(60), {("stream_progress", "compact", None): NOW - MIN}, False, "a minute ago"),
        (stats(3, small=1), {}, False, "one small file: nothing to merge"),
        (stats(49), {}, False, "49 small files: below the stream's threshold of 50"),
        (stats(50), {}, True, "50 small files: the threshold"),
        (stats(80, small=49), {}, False, "80 files, 31 of them already compacted: 49 small"),
    ],
)
def test_compaction_of_an_unpartitioned_table(stats_of_table, last, expected, why):
    due = M.compactions_due(
        "stream_progress",
        None,
        {None: stats_of_table},
        closed_until("2026-11-20"),
        STREAM,
        NOW,
        last,
    )
    assert bool(due) == expected, why
    assert all(a.predicate is None and a.kind == M.COMPACT for a in due)


@pytest.mark.parametrize(
    "last, first_ms, schedule, expected, why",
    [
        ({}, NOW - 24 * H, EVERY_15M, ["events", "late_events"], "never vacuumed, a day running"),
        ({}, NOW - H, EVERY_15M, [], "never vacuumed, but the writer started an hour ago"),
        (
            {("events", "vacuum", None): NOW - H},
            NOW - 48 * H,
            EVERY_15M,
            ["late_events"],
            "events was vacuumed an hour ago",
        ),
        ({}, NOW - 48 * H, M.Schedule(15 * MIN, True, 0), [], "vacuum_interval 0s: never"),
    ],
)
def test_vacuums_due(last, first_ms, schedule, expected, why):
    due = M.vacuums_due(["events", "late_events"], schedule, NOW, last, first_ms)
    assert [a.table for a in due] == expected, why


def test_a_vacuum_with_nothing_to_free_is_not_due():
    due = M.vacuums_due(
        ["events", "late_events"], EVERY_15M, NOW, {}, NOW - 24 * H, lambda t: t == "events"
    )
    assert [a.table for a in due] == ["events"]


DAY_MS = 24 * H
WEEK = 7 * DAY_MS


@pytest.mark.parametrize(
    "removed_ms, expected, why",
    [
        (None, True, "unknown: removals before the writer kept count, a killed write's files"),
        ((), False, "nothing removed since the last VACUUM"),
        ((NOW - DAY_MS,), False, "removed a day ago: kept for the week's retention"),
        ((NOW - DAY_MS, NOW - WEEK), True, "one removal a week old: VACUUM deletes it"),
        ((NOW - WEEK + 1,), False, "a millisecond short of the retention"),
    ],
)
def test_vacuum_frees(removed_ms, expected, why):
    assert M.vacuum_frees(removed_ms, NOW, WEEK) == expected, why


def test_still_pending_keeps_what_a_vacuum_could_not_delete_yet():
    removed = (NOW - 8 * DAY_MS, NOW - WEEK, NOW - DAY_MS, NOW)
    assert M.still_pending(removed, NOW, WEEK) == (NOW - DAY_MS, NOW)


def test_a_drained_stream_has_every_date_closed():
    closed = M.date_closed_by(None, drained=True)
    assert closed("2030-01-01")
    assert not M.date_closed_by(None, drained=False)("2020-01-01")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize(
    "watermark, tz, reach_ms, allowed_ms, expected, why",
    [
        ("2026-11-21T00:01:00+00:00", "UTC", MIN, 0, "2026-11-20", "midnight + one window: closed"),
        ("2026-11-21T00:00:59.999+00:00", "UTC", MIN, 0, "2026-11-19", "a millisecond short"),
        ("2026-11-21T00:06:00+00:00", "UTC", MIN, 5 * MIN, "2026-11-20", "allowed lateness adds"),
        ("2026-11-21T00:05:59+00:00", "UTC", MIN, 5 * MIN, "2026-11-19", "...and must pass too"),
        (
            "2026-11-21T00:20:00+00:00",
            "UTC",
            2 * 10 * MIN,
            0,
            "2026-11-20",
            "sessions reach 2 gaps",
        ),
        (
            "2026-11-21T05:01:00+00:00",
            "America/New_York",
            MIN,
            0,
            "2026-11-20",
            "a business date ends at local midnight (05:00 UTC in November)",
        ),
    ],
)
def test_closed_through(watermark, tz, reach_ms, allowed_ms, expected, why):
    day = closed_through(epoch_ms(utc(watermark)), tz, reach_ms, allowed_ms)
    assert day == date.fromisoformat(expected), why
    # the same rule as date_closed_at, from both sides: the date is closed, the next one not
    assert epoch_ms(date_closed_at(day, tz, reach_ms, allowed_ms)) <= epoch_ms(utc(watermark))
    next_day = date.fromordinal(day.toordinal() + 1)
    assert epoch_ms(date_closed_at(next_day, tz, reach_ms, allowed_ms)) > epoch_ms(utc(watermark))


def test_window_reach():
    assert window_reach_ms(60_000) == 60_000
    assert window_reach_ms(60_000, session_gap_ms=30_000) == 60_000  # 2 gaps
    assert window_reach_ms(60_000, session_gap_ms=45_000) == 90_000


@pytest.mark.parametrize(
    "current, wanted, expected, why",
    [
        ({}, {"delta.appendOnly": "true"}, {"delta.appendOnly": "true"}, "missing: set"),
        ({"delta.appendOnly": "true"}, {"delta.appendOnly": "true"}, {}, "equal: nothing"),
        ({"delta.appendOnly": "TRUE"}, {"delta.appendOnly": "true"}, {}, "case is not a change"),
        (
            {"delta.logRetentionDuration": "interval 30 days"},
            {"delta.logRetentionDuration": "interval 7 days"},
            {"delta.logRetentionDuration": "interval 7 days"},
            "a changed setting is applied to an existing table",
        ),
    ],
)
def test_properties_to_set(current, wanted, expected, why):
    assert M.properties_to_set(current, wanted) == expected, why


def test_retention_properties_are_delta_intervals():
    assert M.retention_properties(7 * 24 * H, 30 * 24 * H) == {
        "delta.deletedFileRetentionDuration": "interval 7 days",
        "delta.logRetentionDuration": "interval 30 days",
    }
    assert M.retention_properties(36 * H, 90 * MIN) == {
        "delta.deletedFileRetentionDuration": "interval 36 hours",
        "delta.logRetentionDuration": "interval 5400 seconds",
    }


@pytest.mark.parametrize(
    "stats_before, changes, expected, why",
    [
        (
            {},
            [("2026-11-20", 1000, 1), ("2026-11-20", 2000, 1)],
            {"2026-11-20": M.FileStats(2, 3000, 2, 2)},
            "two small files appended to a new date",
        ),
        (
            {"2026-11-20": M.FileStats(2, 3000, 2, 2)},
            [("2026-11-20", 1000, -1), ("2026-11-20", 2000, -1), ("2026-11-20", 3000, 1)],
            {"2026-11-20": M.FileStats(1, 3000, 1, 1)},
            "a compaction: two removed, one added, sizes kept exact",
        ),
        (
            {None: M.FileStats(1, 20 * 1024 * 1024, 0, 1)},
            [(None, 20 * 1024 * 1024, -1)],
            {},
            "the last file of a partition removed: the partition is gone",
        ),
        (
            {},
            [(None, M.SMALL_FILE_BYTES, 1), (None, M.CLOSED_FILE_BYTES, 1)],
            {None: M.FileStats(2, M.SMALL_FILE_BYTES + M.CLOSED_FILE_BYTES, 0, 1)},
            "sizes at the thresholds are not below them",
        ),
    ],
)
def test_apply_changes(stats_before, changes, expected, why):
    assert M.apply_changes(stats_before, changes) == expected, why


def test_the_layout_moved_forward_from_the_log_equals_the_layout_read_whole(spark, warehouse):
    """Appends to two dates, a compaction of one (removes with their sizes), appends again:
    the layout kept from the commits equals a fresh read at every step."""
    import os

    path = os.path.join(warehouse, "t")
    rows = spark.range(40).selectExpr(
        "id", "IF(id % 2 = 0, '2026-11-20', '2026-11-21') AS event_date"
    )

    def append(n: int) -> None:
        rows.where(f"id % 4 < {n}").repartition(2).write.format("delta").mode("append").partitionBy(
            "event_date"
        ).save(path)

    append(4)
    known = M.layout_now(spark, path, "event_date", None)
    assert known.stats == M.live_files(spark, path, "event_date") and known.stats
    for step in ("append", "compact", "append again"):
        if step == "compact":
            spark.sql(f"OPTIMIZE delta.`{path}` WHERE event_date = '2026-11-20'")
        else:
            append(3)
        moved = M.layout_now(spark, path, "event_date", known)
        assert moved.version > known.version
        assert moved.stats == M.live_files(spark, path, "event_date"), step
        known = moved
    assert known.stats["2026-11-20"].files < known.stats["2026-11-21"].files  # compacted

    # A layout said to be newer than the table (a table written anew): read whole.
    ahead = M.KnownLayout(known.version + 100, {})
    assert M.layout_now(spark, path, "event_date", ahead).stats == known.stats
