"""The restatement rules as plain values (tally/restatements.py, tally/frontier.py): the
signal counted above a baseline, the status a change gets, and when a date reads reopened."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from tally import restatements as R
from tally.dates import counted_dates, window_reach_back_ms
from tally.frontier import is_within, merged

D = date(2026, 11, 19)
RUN_TIME = datetime(2026, 11, 21, 3, tzinfo=UTC)


@pytest.mark.parametrize(
    ("app", "batch", "frontier", "within"),
    [
        ("a", 5, {"a": 5}, True),  # the frontier's own batch was read
        ("a", 6, {"a": 5}, False),  # a later batch was not
        ("b", 0, {"a": 5}, False),  # a query the pin never saw: all of it above
        (None, 3, {"": 3}, True),  # rows without an app_id are under ""
        (None, 3, {}, False),  # an empty frontier read nothing
    ],
)
def test_is_within(app: str | None, batch: int, frontier: dict[str, int], within: bool) -> None:
    assert is_within(app, batch, frontier) is within


def test_merged_and_baseline_keep_the_larger_batch() -> None:
    assert merged({"a": 3}, {"a": 5, "b": 1}) == {"a": 5, "b": 1}
    # each check of the run raises its baseline, changed or not
    assert R.baseline({"a": 3}, [{"a": 7}, {"a": 5, "b": 2}]) == {"a": 7, "b": 2}
    assert R.baseline({"a": 3}, []) == {"a": 3}


def _progress(
    app: str, batch: int, counts: dict[date, tuple[int, int]], zone: str = "UTC"
) -> dict[str, object]:
    return {
        "app_id": app,
        "batch_id": batch,
        "new_events_by_date": {d: n for d, (n, _) in counts.items()},
        "new_amount_by_date": {d: a for d, (_, a) in counts.items()},
        "report_timezone": zone,
    }


NEXT = date(2026, 11, 20)
PROGRESS = [
    _progress("a", 4, {D: (100, 5_000)}),  # read by the run (at its frontier)
    _progress("a", 6, {D: (3, 30), NEXT: (9, 90)}),  # after it: D's 3 count
    _progress("a", 7, {NEXT: (5, 50)}),  # after it, another date only
    _progress("b", 0, {D: (1, -4)}),  # a query the run never saw
]


@pytest.mark.parametrize(
    ("frontier", "day", "expected"),
    [
        ({"a": 5}, D, (4, 26)),  # batches 6 and b's 0 on D
        ({"a": 5, "b": 0}, D, (3, 30)),  # b's batch read too
        ({"a": 7, "b": 0}, D, (0, 0)),  # everything read: no signal
        ({"a": 3}, NEXT, (14, 140)),  # only the date asked for
    ],
)
def test_signal_sums_the_batches_above_the_frontier(
    frontier: dict[str, int], day: date, expected: tuple[int, int]
) -> None:
    assert R.signal(PROGRESS, frontier, day, "UTC") == expected


def test_a_row_keyed_in_another_zone_counts_the_dates_around() -> None:
    """Keyed in UTC, asked in Asia/Kolkata: any Kolkata day overlaps UTC's day before, the day
    and the day after, so all three count (the exact check decides)."""
    rows = [_progress("a", 9, {D - timedelta(days=1): (1, 1), D: (2, 2), NEXT: (4, 4)})]
    rows.append(_progress("a", 9, {NEXT + timedelta(days=1): (8, 8)}))
    assert R.signal(rows, {"a": 1}, D, "Asia/Kolkata") == (7, 7)
    assert R.signal(rows, {"a": 1}, D, "UTC") == (2, 2)


def test_signal_reads_maps_as_arrow_gives_them() -> None:
    """delta-rs returns a MAP as a list of (key, value) pairs."""
    row = {
        "app_id": "a",
        "batch_id": 9,
        "new_events_by_date": [(D, 2)],
        "new_amount_by_date": [(D, 7)],
        "report_timezone": "UTC",
    }
    assert R.signal([row], {"a": 1}, D, "UTC") == (2, 7)
    # a row from before the signal has no maps: nothing
    assert R.signal([{"app_id": "a", "batch_id": 9}], {"a": 1}, D, "UTC") == (0, 0)


@pytest.mark.parametrize(
    ("change", "policy", "tolerance", "status"),
    [
        (R.Change(0, 0, 0), "rerun", (0, 0), R.UNCHANGED),  # repeats only: no restatement
        (R.Change(0, 0, 0), "flag", (0, 0), R.UNCHANGED),
        (R.Change(3, 300, 2), "flag", (10, 1_000), R.PENDING),  # flag never re-runs
        (R.Change(3, 300, 2), "rerun", (3, 300), R.AUTO_ACCEPTED),  # at the tolerance
        (R.Change(3, 301, 2), "rerun", (3, 300), R.RERUN),  # one minor unit beyond
        (R.Change(4, 300, 2), "rerun", (3, 300), R.RERUN),  # one event beyond
        (R.Change(-2, -300, 1), "rerun", (3, 300), R.AUTO_ACCEPTED),  # absolute values
        (R.Change(0, 0, 2), "rerun", (0, 0), R.AUTO_ACCEPTED),  # an event moved windows
    ],
)
def test_decide(change: R.Change, policy: str, tolerance: tuple[int, int], status: str) -> None:
    assert R.decide(change, policy, tolerance) == status


MIN = 60_000
DAY_START = int(datetime(2026, 11, 19, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("latest_start_ms", "back_ms", "zone", "dates"),
    [
        (DAY_START, 0, "UTC", (D, D)),  # a tumbling window at midnight is the new date's
        (DAY_START - MIN, 0, "UTC", (D - timedelta(days=1), D - timedelta(days=1))),
        # hopping 5m every 1m: an event whose latest window starts at 00:01 is also in
        # windows starting 23:57-23:59 of the day before
        (DAY_START + MIN, 4 * MIN, "UTC", (D - timedelta(days=1), D)),
        (DAY_START + 4 * MIN, 4 * MIN, "UTC", (D, D)),  # all its windows start on D
        # 18:30 UTC is midnight in Kolkata: the next business date there
        (DAY_START + 18 * 60 * MIN + 30 * MIN, 0, "Asia/Kolkata", (NEXT, NEXT)),
        (DAY_START + 18 * 60 * MIN + 29 * MIN, 0, "Asia/Kolkata", (D, D)),
    ],
)
def test_counted_dates(
    latest_start_ms: int, back_ms: int, zone: str, dates: tuple[date, date]
) -> None:
    assert counted_dates(latest_start_ms, back_ms, zone) == dates


@pytest.mark.parametrize(
    ("window_ms", "slide_ms", "gap_ms", "back_ms"),
    [
        (MIN, None, 0, 0),  # tumbling: the event's one window
        (MIN, MIN, 0, 0),  # a slide equal to the size is tumbling
        (5 * MIN, MIN, 0, 4 * MIN),  # hopping: the four earlier windows hold it too
        (MIN, None, 10_000, 20_000),  # sessions: two gaps back, as window_reach_ms
    ],
)
def test_window_reach_back(window_ms: int, slide_ms: int | None, gap_ms: int, back_ms: int) -> None:
    assert window_reach_back_ms(window_ms, slide_ms, gap_ms) == back_ms


RUN = {
    "business_date": D,
    "run_time": RUN_TIME,
    "window_ms": 60_000,
    "report_timezone": "UTC",
    "settings": '{"session_gap_ms": 0}',
    "pin_frontiers": {"events": {"a": 5}, "late_events": {"a": 5}},
}


def _restatement(status: str, frontier: dict[str, int], run_time: datetime = RUN_TIME) -> dict:
    return {
        "business_date": D,
        "run_time": run_time,
        "detected_at": datetime(2026, 11, 22, tzinfo=UTC),
        "events_frontier": frontier,
        "new_events": 3,
        "new_amount": 30,
        "windows_affected": 2,
        "status": status,
    }


def test_reopened_when_asked_before_any_check() -> None:
    found = R.reopened(RUN, [], PROGRESS)
    assert found == {"events": 4, "amount": 26, "windows": None, "verified": False}
    # the stream's count only: NEXT's events never touch D


def test_an_unchanged_check_raises_the_baseline() -> None:
    """The check found only repeats up to batch 7 of a and 0 of b: no longer reopened."""
    assert R.reopened(RUN, [_restatement(R.UNCHANGED, {"a": 7, "b": 0})], PROGRESS) is None


def test_a_pending_restatement_keeps_the_date_reopened() -> None:
    found = R.reopened(RUN, [_restatement(R.PENDING, {"a": 7, "b": 0})], PROGRESS)
    assert found is not None and found["verified"] is True
    assert (found["events"], found["amount"], found["windows"]) == (3, 30, 2)


def test_a_restatement_of_an_older_run_does_not_count() -> None:
    older = datetime(2026, 11, 20, 3, tzinfo=UTC)
    found = R.reopened(RUN, [_restatement(R.PENDING, {"a": 7, "b": 0}, older)], PROGRESS)
    assert found is not None and found["verified"] is False  # the signal still counts


def _swept(frontier: dict[str, int], run_time: datetime = RUN_TIME) -> dict:
    return {"business_date": D, "run_time": run_time, "events_frontier": frontier}


@pytest.mark.parametrize(
    ("swept", "reopened"),
    [
        ([_swept({"a": 7, "b": 0})], False),  # a full check read up to here: nothing above
        ([_swept({"a": 5})], True),  # below some of the signal: the rest still counts
        ([_swept({"a": 7, "b": 0}, datetime(2026, 11, 20, 3, tzinfo=UTC))], True),  # older run
        ([], True),  # never swept: from the run's frontier
    ],
)
def test_a_sweep_of_the_same_run_raises_the_baseline(swept: list[dict], reopened: bool) -> None:
    assert (R.reopened(RUN, [], PROGRESS, swept) is not None) is reopened


def test_a_sweep_leaves_a_pending_restatement_open() -> None:
    """A pending date has no new signal once checked, so a later sweep names it too."""
    rows = [_restatement(R.PENDING, {"a": 7, "b": 0})]
    found = R.reopened(RUN, rows, PROGRESS, [_swept({"a": 9, "b": 3})])
    assert found is not None and found["verified"] is True


def test_a_run_from_before_frontiers_is_never_reopened() -> None:
    assert R.reopened({**RUN, "pin_frontiers": None}, [], PROGRESS) is None


def _arrow(rows: list[dict[str, object]]) -> object:
    """`stream_progress` rows as delta-rs reads them (maps as Arrow maps)."""
    import pyarrow as pa

    dates = pa.map_(pa.date32(), pa.int64())
    return pa.table(
        {
            "app_id": pa.array([r["app_id"] for r in rows], pa.string()),
            "batch_id": pa.array([r["batch_id"] for r in rows], pa.int64()),
            "new_events_by_date": pa.array(
                [list(r["new_events_by_date"].items()) for r in rows], dates
            ),
            "new_amount_by_date": pa.array(
                [list(r["new_amount_by_date"].items()) for r in rows], dates
            ),
            "report_timezone": pa.array([r["report_timezone"] for r in rows], pa.string()),
        }
    )


@pytest.mark.parametrize(
    ("baseline", "zone"),
    [
        ({"a": 5}, "UTC"),  # b never seen: all of it above
        ({"a": 5, "b": 0}, "UTC"),
        ({"a": 7, "b": 0}, "UTC"),  # nothing above
        ({"a": 3}, "Asia/Kolkata"),  # rows keyed in UTC: the days around count
        ({}, "UTC"),  # a run that read nothing of these queries
    ],
)
def test_the_desks_signal_of_every_date_at_once_is_the_rules(
    baseline: dict[str, int], zone: str
) -> None:
    """`tally.ledger_reads.signals` (Arrow, every date at once) against `signal` (the rule)."""
    from tally.ledger_reads import signals

    rows = [*PROGRESS, _progress("c", 1, {NEXT + timedelta(days=1): (2, 20)})]
    days = [D - timedelta(days=1), D, NEXT, NEXT + timedelta(days=1)]
    opened = [R.OpenRun(day, baseline, zone, None) for day in days]
    expected = {day: R.signal(rows, baseline, day, zone) for day in days}
    assert signals(_arrow(rows), opened) == {d: v for d, v in expected.items() if v != (0, 0)}
    assert any(v != (0, 0) for v in expected.values()) or baseline == {"a": 7, "b": 0}
