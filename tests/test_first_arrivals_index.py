"""The index of event ids (`batch.firsts`, `dedup = index`) against `dedup = full` (the
oracle) and against first arrivals computed in plain Python.

Scenarios are drawn by hypothesis: ids reused across dates with other event times, copies
outside the date's partitions that arrive first or later, two streaming queries whose clocks
disagree (the second one's batches are committed later but stamped earlier), late rows, a
weak hash that makes distinct ids collide, and several commits, each reconciled in turn (the
first without an index, the last with lines the index lacks: the run adds those in memory;
between them the index is caught up as the nightly does); then the first run is reproduced at
its own pin (the index has moved past it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from batch_fixtures import (
    append,
    ensure_inputs,
    event,
    late,
    ms,
    table_rows,
)
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from batch import diff
from batch.firsts import above, catch_up
from batch.reconcile import reconcile, recorded_run, runs_of
from batch.reproduce import verify
from tally import tables as T
from tally.frontier import merged
from tally.vocabulary import ARRIVAL_ORDER
from tally.windows import window_start_ms

DAY = date(2026, 11, 20)
W = 60_000
H = 3_600_000
D0 = ms("2026-11-20T00:00:00Z")
NOW = datetime(2026, 11, 23, 3, tzinfo=UTC)
# Day offsets of copies: the date itself, its neighbours (inside its `event_date` partitions,
# `utc_dates_touching`) and dates well outside them.
OFFSETS = (-5, -3, -1, 0, 0, 0, 1, 3)
IDS = tuple(f"id-{i}" for i in range(6))
# The two queries: "b" commits after "a" but its clock runs two hours behind.
CLOCK = {"a": 0, "b": -2 * H}
AUDIT = 400 * 86_400_000


# -- what a catch-up reads ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pin", "covered", "expected"),
    [
        # pin, covered, the (app, batch) lines of `LINES` read; why
        ({"a": 3}, {}, {("a", 1), ("a", 2), ("a", 3)}),  # no index: the whole log
        ({"a": 3}, {"a": 1}, {("a", 2), ("a", 3)}),  # above the covered batch
        ({"a": 3}, {"a": 3}, None),  # caught up: nothing to read
        ({"a": 2}, {"a": 3}, None),  # an older pin than the index: nothing either
        ({"a": 3, "b": 1}, {"a": 3}, {("b", 1)}),  # a query the index has not seen
        ({"a": 3, "": 0}, {"a": 2}, {("a", 3), (None, 0)}),  # rows without an app_id
    ],
)
def test_above_reads_the_lines_the_index_lacks(spark, pin, covered, expected) -> None:
    lines = spark.createDataFrame(
        [("a", 1), ("a", 2), ("a", 3), ("b", 1), (None, 0)], "app_id string, batch_id long"
    )
    todo = above(pin, covered)
    if expected is None:
        assert todo is None
        return
    assert todo is not None
    assert {(r["app_id"], r["batch_id"]) for r in lines.where(todo).collect()} == expected


def test_merged_frontier_keeps_the_larger_batch() -> None:
    assert merged({"a": 3, "b": 1}, {"a": 2, "c": 0}) == {"a": 3, "b": 1, "c": 0}


# -- the nightly with the index against dedup = full --------------------------------------------


line_st = st.tuples(
    st.sampled_from(IDS),
    st.sampled_from(OFFSETS),
    st.integers(0, 3),  # which minute of its day (a few windows)
    st.integers(1, 9),  # amount
    st.booleans(),  # late
)
commit_st = st.tuples(st.sampled_from(tuple(CLOCK)), st.lists(line_st, min_size=1, max_size=5))


@pytest.fixture
def weak_hash(monkeypatch) -> Iterator[None]:
    """Three hash values for every id: most hash matches are distinct ids, told apart by the
    exact event_id comparison behind them."""

    def weak(event_id: Any = "event_id") -> Any:
        return F.pmod(F.xxhash64(event_id), F.lit(3))

    monkeypatch.setattr(diff, "id_hash", weak)
    yield


def _rows(commits: list[tuple[str, list[tuple[str, int, int, int, bool]]]]) -> list[list[dict]]:
    """Each commit's `events` rows: one micro-batch of its query, stamped by its clock."""
    batch_of = dict.fromkeys(CLOCK, 0)
    out, number = [], itertools.count()
    for k, (app, lines) in enumerate(commits):
        batch_of[app] += 1
        ingest = D0 + 6 * 86_400_000 + k * 600_000 + CLOCK[app]
        rows = []
        for event_id, offset, minute, amount, is_late in lines:
            n = next(number)
            row = event(
                event_id,
                "k",
                amount,
                D0 + offset * 86_400_000 + minute * W + n,
                ingest=ingest,
                status="late" if is_late else "on_time",
                batch_id=batch_of[app],
                source_line=n,
            )
            rows.append({**row, "app_id": app})
        out.append(rows)
    return out


def _expected_truth(commits: list[list[dict]]) -> dict[tuple[int, str], tuple[int, int]]:
    """The date's (window start, key) -> (count, amount), by first arrival in plain Python."""
    first: dict[str, tuple[tuple[Any, ...], dict]] = {}
    for rows in commits:
        for r in rows:
            order = tuple(r[c] for c in ARRIVAL_ORDER)
            if r["event_id"] not in first or order < first[r["event_id"]][0]:
                first[r["event_id"]] = (order, r)
    truth: dict[tuple[int, str], tuple[int, int]] = {}
    for _, r in first.values():
        start = window_start_ms(r["event_time"], W)
        if D0 <= start < D0 + 86_400_000:
            count, amount = truth.get((start, r["key"]), (0, 0))
            truth[(start, r["key"])] = (count + 1, amount + r["amount"])
    return truth


def _catch_up(spark, warehouse: str, now: datetime) -> None:
    """The index caught up to the `events` pin of the date's latest run (the nightly's
    `stage_index`)."""
    run = recorded_run(spark, warehouse, DAY)
    assert run is not None
    frontier = run["pin_frontiers"][T.EVENTS.name]
    appended = catch_up(spark, warehouse, frontier, run["events_version"], now)
    assert appended is None or appended > 0


def _outputs(spark, warehouse: str) -> dict[str, list]:
    return {
        t.name: table_rows(spark, warehouse, t.name)
        for t in (T.BATCH_AGGREGATES, T.RECONCILIATION, T.RECONCILIATION_PARTITIONS)
    }


def _truth_of(spark, warehouse: str) -> dict[tuple[int, str], tuple[int, int]]:
    rows = T.read_table(spark, warehouse, T.BATCH_AGGREGATES.name).collect()
    return {
        (int(r["window_start"].timestamp() * 1000), r["key"]): (r["event_count"], r["amount_sum"])
        for r in rows
    }


# Every case at once: an id whose first copy lies weeks before the date; an id whose copy
# outside the date arrives first because its query's clock runs behind (committed later,
# stamped earlier); late rows; ids that share the weak hash.
DESIGNED = [
    ("a", [("id-0", -5, 0, 3, False), ("id-1", 0, 1, 4, True)]),
    ("b", [("id-1", 3, 0, 5, False), ("id-0", 0, 2, 6, False)]),
    # id-2's first line is weeks before the date, in the last commit: not yet in the index
    ("a", [("id-2", -5, 0, 1, False), ("id-2", 0, 3, 7, True), ("id-3", -1, 1, 2, False)]),
]


@settings(
    max_examples=1,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # shrinking re-runs the nightly for minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(commits=DESIGNED)
@given(commits=st.lists(commit_st, min_size=2, max_size=3))
def test_index_gives_the_rows_of_the_full_log(
    spark, tmp_path_factory, small_delta_snapshots, weak_hash, commits
) -> None:
    root = tmp_path_factory.mktemp("firsts")
    index, full = str(root / "index"), str(root / "full")
    rows = _rows(commits)
    for warehouse in (index, full):
        ensure_inputs(spark, warehouse)
    for k, batch in enumerate(rows):
        late_rows = [late(r, W, 1000) for r in batch if r["arrival_status"] == "late"]
        now = NOW + timedelta(minutes=k)
        for warehouse, dedup in ((index, "index"), (full, "full")):
            append(spark, warehouse, T.EVENTS, batch)
            if late_rows:
                append(spark, warehouse, T.LATE_EVENTS, late_rows)
            reconcile(spark, warehouse, DAY, W, now=now, dedup=dedup)
        if k < len(rows) - 1:  # as the nightly does after a run; not after the last one
            _catch_up(spark, index, now)
        assert _outputs(spark, index) == _outputs(spark, full)
        assert _truth_of(spark, index) == _expected_truth(rows[: k + 1])
    # the first run again at its own pin: the index now holds entries above it
    when = runs_of(spark, index, DAY)[0]["run_time"].replace(tzinfo=UTC)
    check = verify(spark, index, DAY, when, now=NOW + timedelta(hours=1), audit_window_ms=AUDIT)
    assert check.matched, check.describe()
    assert T.exists(spark, index, T.EVENT_INDEX.name)
    assert not T.exists(spark, full, T.EVENT_INDEX.name)
